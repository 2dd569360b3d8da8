"""Spawned processes that call a Ninja endpoint from 8 threads each (``test_ninja_exactness``).

A process sets Django up itself (``tests.sites.urls_ninja``, the suite's
redis-server as every cache), then for each task ``(path, address,
attempts)`` waits for the other processes, and each of its threads makes
``attempts`` GETs of ``path`` from ``address`` through Django's test client
(the whole Ninja stack: the API's view, its throttle, the middleware);
it reports the number answered 200.
"""

from __future__ import annotations

import os
import threading
from typing import Any

THREADS = 8
PROCESSES = 3


def serve_ninja(caches: dict[str, Any], tasks: Any, results: Any, start: Any) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.sites.settings"
    import django

    django.setup()
    from django.test import Client, override_settings

    middleware = ["django_rl.middleware.RateLimitMiddleware"]
    with override_settings(
        CACHES=caches, DJANGO_RL={}, ROOT_URLCONF="tests.sites.urls_ninja", MIDDLEWARE=middleware
    ):
        # Connect, load the scripts, build both APIs before the race.
        for path in ("/rl/hello", "/ninja/hello"):
            Client(REMOTE_ADDR="192.0.2.254").get(path)
        results.put("ready")
        while (task := tasks.get()) is not None:
            counts = [0] * THREADS
            barrier = threading.Barrier(THREADS)
            threads = [
                threading.Thread(target=_call, args=(task, barrier, counts, i))
                for i in range(THREADS)
            ]
            start.wait(60)
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            results.put(sum(counts))


def _call(task: tuple[str, str, int], barrier: Any, counts: list[int], index: int) -> None:
    from django.test import Client

    path, address, attempts = task
    client = Client(REMOTE_ADDR=address)
    barrier.wait(60)
    counts[index] = sum(client.get(path).status_code == 200 for _ in range(attempts))
