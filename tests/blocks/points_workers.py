"""Child processes of tests/blocks (multiprocessing, spawn): penalties and rewards in a race."""

from __future__ import annotations

import os
import threading
from typing import Any


def penalize_and_reward(
    redis_url: str,
    policies: dict[str, Any],
    name: str,
    identity: str,
    ready: Any,
    go: Any,
    results: Any,
) -> None:
    """Once ``go`` is set, 8 threads each penalize 3 and reward 1, 10 times; report "done"."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.sites.settings"
    import django

    django.setup()
    from django.test import override_settings

    from django_rl import get_policy
    from tests.support.redis_server import caches_for

    with override_settings(CACHES=caches_for(redis_url), DJANGO_RL={"POLICIES": policies}):
        policy = get_policy(name)
        policy.peek("warm-up")
        ready.set()
        go.wait(30)

        def work() -> None:
            for _ in range(10):
                policy.penalize(identity, 3)
                policy.reward(identity, 1)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        results.put("done")


def hit_until_denied(
    redis_url: str, policies: dict[str, Any], identity: str, ready: Any, results: Any
) -> None:
    """Hit every 20 ms, its loader thread on (overrides off); report hits allowed and when
    (``time.monotonic``, the same clock as the parent's) the first was denied."""
    import time

    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.sites.settings"
    import django

    django.setup()
    from django.test import override_settings

    from django_rl import get_policy
    from django_rl.overrides.loader import LOADER
    from tests.support.redis_server import caches_for

    rl = {"POLICIES": policies, "OVERRIDES": False, "DENY_CACHE_SIZE": 0}
    with override_settings(CACHES=caches_for(redis_url), DJANGO_RL=rl):
        policy = get_policy("p")
        allowed = 0
        while policy.hit(identity).allowed and allowed < 2:
            allowed += 1
        ready.set()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if not policy.hit(identity).allowed:
                results.put((allowed, time.monotonic(), LOADER.running))
                return
            allowed += 1
            time.sleep(0.02)
        results.put((allowed, None, LOADER.running))
