"""Code that runs in processes the history's tests spawn (multiprocessing, spawn).

Each sets Django up itself, pointed at the parent's redis-server, and lets
its own history thread write its counts, as a worker of a site does.
"""

from __future__ import annotations

import os
import time
from typing import Any


def decide_and_let_the_thread_write(
    redis_url: str, policies: dict[str, Any], name: str, hits: int, results: Any
) -> None:
    """Hit ``name`` ``hits`` times (one identity); report (allowed, seconds until written)."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.sites.settings"
    import django

    django.setup()
    from django.test import override_settings

    from django_rl import get_policy
    from django_rl.observability.history import RECORDER
    from tests.support.redis_server import caches_for

    with override_settings(CACHES=caches_for(redis_url), DJANGO_RL={"POLICIES": policies}):
        policy = get_policy(name)
        allowed = sum(policy.hit("ip:192.0.2.99").allowed for _ in range(hits))
        done = time.monotonic()
        # multiprocessing ends a child without its exit handlers: the thread writes.
        while not RECORDER.settled() and time.monotonic() - done < 10:
            time.sleep(0.02)
        results.put((allowed, time.monotonic() - done, RECORDER.pending(), RECORDER.flushes))
