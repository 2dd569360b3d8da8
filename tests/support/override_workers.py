"""Processes of the overrides tests (multiprocessing, spawn): one changes overrides, others decide.

Each sets Django up on ``tests.sites.settings_overrides``: the database file and
the redis-server of the test. Times are ``time.time()``: every process runs
on this machine, so they compare.
"""

from __future__ import annotations

import datetime
import logging
import os
import time
from typing import Any

#: How often a deciding process decides (seconds between decisions).
PACE = 0.005


def setup(database: str, redis_url: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.sites.settings_overrides"
    os.environ["DJANGO_RL_TEST_DB"] = database
    os.environ["DJANGO_RL_TEST_REDIS"] = redis_url
    import django

    django.setup()


def change_overrides(database: str, redis_url: str, tasks: Any, results: Any) -> None:
    """Migrate the database, then add or delete overrides on demand, as the admin does.

    A task is ``("add", policy, identity, action)`` or ``("delete", policy,
    identity)``; each reports ``(kind, time before, time after)``; ``None``
    ends.
    """
    setup(database, redis_url)
    from django.core.management import call_command
    from django.utils import timezone

    from django_rl.models import Override

    call_command("migrate", verbosity=0)
    results.put("migrated")
    while (task := tasks.get()) is not None:
        kind, policy, identity, *action = task
        began = time.time()
        if kind == "add":
            Override.objects.create(
                policy=policy,
                identity=identity,
                action=action[0],
                expires_at=timezone.now() + datetime.timedelta(hours=1),
                reason="tests",
            )
        else:
            Override.objects.filter(policy=policy, identity=identity).delete()
        results.put((kind, began, time.time()))


def watch_decisions(
    database: str, redis_url: str, policy_name: str, identity: str, results: Any, stop: Any
) -> None:
    """Decide for ``identity`` every few ms; report each change between allowed and denied.

    Reports ``("ready", loader running, loads)`` once the loader has loaded,
    then ``(allowed, time)`` for the first decision and each change.
    """
    setup(database, redis_url)
    from django_rl import get_policy
    from django_rl.overrides import LOADER

    policy = get_policy(policy_name)
    policy.hit(identity)  # the first decision starts the loader
    while LOADER.loads == 0:
        time.sleep(0.01)
    results.put(("ready", LOADER.running, LOADER.loads))
    _report_changes(policy, identity, results, stop)


def _report_changes(policy: Any, identity: str, results: Any, stop: Any) -> None:
    state = None
    while not stop.is_set():
        allowed = policy.hit(identity).allowed
        if allowed != state:
            results.put((allowed, time.time()))
            state = allowed
        time.sleep(PACE)


def decide_without_overrides(database: str, redis_url: str, seconds: float, results: Any) -> None:
    """Decide for ``seconds`` where overrides cannot load; report decisions, log lines, loader."""
    setup(database, redis_url)
    from django_rl import get_policy
    from django_rl.overrides import LOADER

    lines: list[tuple[str, str]] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append((record.levelname, record.getMessage()))

    logger = logging.getLogger("django_rl")
    logger.addHandler(Keep(logging.INFO))
    logger.setLevel(logging.INFO)
    policy = get_policy("small")
    allowed = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        allowed.append(policy.hit("ip:10.0.0.1").allowed)
        time.sleep(0.05)
    results.put((allowed[:5], len(allowed), lines, LOADER.running, LOADER.loads))


def decide_then_fork(database: str, redis_url: str, identity: str, results: Any, stop: Any) -> None:
    """Decide (the loader starts), then fork as a pre-forking server does; the child decides.

    The child reports whether a loader ran in it before and after its first
    decision, then each change between allowed and denied, like
    :func:`watch_decisions`.
    """
    setup(database, redis_url)
    from django_rl import get_policy
    from django_rl.overrides import LOADER

    policy = get_policy("big")
    policy.hit(identity)
    while LOADER.loads == 0:
        time.sleep(0.01)
    parent_thread = LOADER._thread
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        return
    try:
        before = LOADER.running
        policy.hit(identity)
        after = LOADER.running and LOADER._thread is not parent_thread
        # The rules the parent loaded stay; the child's loader reloads on the next change.
        results.put(("forked", before, after, len(LOADER.rules)))
        _report_changes(policy, identity, results, stop)
    finally:
        results.close()
        results.join_thread()  # what was put reaches the pipe before the exit
        os._exit(0)
