"""What each spawned process of the outcome exactness suite runs.

A spawned child imports nothing of the parent's state: it sets Django up
itself, pointed at the suite's redis-server, and serves tasks: for each, a
login view limited by ``login`` (``count_when="failure"``) hit from
``THREADS`` threads at once, every process released by one barrier.
"""

from __future__ import annotations

import os
import random
import threading
import time
from typing import Any

THREADS = 16
PROCESSES = 3
#: Requests of each thread: every third one a failure (a wrong password).
ATTEMPTS = 24
ATTACKER = "203.0.113.66"


def is_failure(thread: int, attempt: int) -> bool:
    return (thread + attempt) % 3 == 0


def serve(redis_url: str, tasks: Any, results: Any, barrier: Any) -> None:
    """Set Django up, then run each task ``(policies,)`` until ``None``; report the statuses."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.sites.settings"
    import django

    django.setup()
    from django.http import HttpResponse
    from django.test import RequestFactory, override_settings

    from django_rl import get_policy
    from django_rl.decorators import ratelimit
    from tests.support.redis_server import caches_for

    results.put("ready")
    while True:
        task = tasks.get()
        if task is None:
            return
        (policies,) = task
        with override_settings(CACHES=caches_for(redis_url), DJANGO_RL={"POLICIES": policies}):

            @ratelimit("login")
            def login(request: Any) -> HttpResponse:
                time.sleep(random.uniform(0, 0.004))  # the password hash, roughly
                if request.GET.get("password") != "right":
                    return HttpResponse("wrong", status=401)
                return HttpResponse("welcome")

            get_policy("login").peek("warm-up")  # connect before the race
            statuses: list[int] = []
            lock = threading.Lock()
            factory = RequestFactory()

            threads = [
                threading.Thread(target=_hammer, args=(login, factory, i, statuses, lock))
                for i in range(THREADS)
            ]
            barrier.wait(60)
            began = time.time()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            results.put((statuses, began, time.time()))


def _hammer(login: Any, factory: Any, thread: int, statuses: list[int], lock: Any) -> None:
    mine = []
    for attempt in range(ATTEMPTS):
        password = "wrong" if is_failure(thread, attempt) else "right"
        response = login(factory.get("/", {"password": password}, REMOTE_ADDR=ATTACKER))
        response.close()
        mine.append(response.status_code)
    with lock:
        statuses.extend(mine)
