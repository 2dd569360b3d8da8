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
