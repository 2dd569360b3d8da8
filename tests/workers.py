"""Code that runs in child processes started by the tests (multiprocessing, spawn).

A spawned child imports nothing of the parent's state, so it sets Django up
itself, pointed at the same redis-server and the same policies.
"""

from __future__ import annotations

import os
import time
from typing import Any


def hammer_policy(
    redis_url: str,
    policies: dict[str, Any],
    name: str,
    identity: str,
    attempts: int,
    cost: int,
    ready: Any,
    go: Any,
    results: Any,
) -> None:
    """Hit ``name`` for ``identity`` ``attempts`` times once ``go`` is set; report allowed count."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    import django

    django.setup()
    from django.test import override_settings

    from django_rl import get_policy
    from tests.redis_server import caches_for

    with override_settings(CACHES=caches_for(redis_url), DJANGO_RL={"POLICIES": policies}):
        policy = get_policy(name)
        policy.peek("warm-up")  # connect and measure the clock before the race
        ready.set()
        go.wait(30)
        allowed = sum(policy.hit(identity, cost).allowed for _ in range(attempts))
    results.put(allowed)


def serve_rounds(
    caches: dict[str, Any],
    policies: dict[str, Any],
    tasks: Any,
    results: Any,
    start: Any,
) -> None:
    """Hit policies in rounds, one per task, until a ``None`` task.

    Reports ``(allowed hits, wall-clock start, end)`` of each round. ``caches``
    is the CACHES setting to use (any topology).

    A task is ``(policy name, identity, attempts, cost)``. Every round waits
    on ``start``, a barrier shared with the other processes and the parent's
    threads, so all of them hit the identity at once. The process stays up
    between rounds: spawning one costs more than a round.
    """
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    import django

    django.setup()
    from django.test import override_settings

    from django_rl import get_policy

    with override_settings(CACHES=caches, DJANGO_RL={"POLICIES": policies}):
        for name in policies:
            get_policy(name).peek("warm-up")  # connect, measure the clock, load the script
        results.put("ready")
        while (task := tasks.get()) is not None:
            name, identity, attempts, cost = task
            policy = get_policy(name)
            start.wait(60)
            began = time.time()
            allowed = sum(policy.hit(identity, cost).allowed for _ in range(attempts))
            results.put((allowed, began, time.time()))
