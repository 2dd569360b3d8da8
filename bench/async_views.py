"""Async views end to end in-process, and what the earlier thread hops would cost.

(``@ratelimit`` now decides async views on the event loop: see
``bench/async_decisions.py`` and docs/http.md; the hops below are the
designs not taken, kept for comparison.)

Serves an async view through Django's real ASGI handler (a
``ThreadSensitiveContext`` per request, as under uvicorn or daphne) with the
test suite's middleware, 50 requests at a time, and through a loop with no
such context (as Django's test ``AsyncClient`` runs). Per request: wall time
and CPU time of the event loop's thread, for:

* no decision (the floor, in the same run),
* ``@ratelimit`` as shipped: decided on the loop (no hop),
* the alternatives not taken: the same hop to the shared thread pool
  (``thread_sensitive=False``; identity functions could then hit the database
  from arbitrary threads), and identity thread-sensitive + Redis in the pool
  (two hops).

Usage: ``.venv/bin/python bench/async_views.py`` (starts and stops its own
redis-server). Runs are interleaved; the table shows medians of 5.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ["DJANGO_SETTINGS_MODULE"] = "tests.sites.settings"

import django

django.setup()

from asgiref.sync import sync_to_async  # noqa: E402
from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.test import override_settings  # noqa: E402
from django.urls import path  # noqa: E402

from django_rl import get_policy  # noqa: E402
from django_rl.decorators import ratelimit  # noqa: E402
from tests.support.asgi import asgi_get  # noqa: E402
from tests.support.redis_server import RedisServer, caches_for  # noqa: E402

REQUESTS, CONCURRENCY, REPEATS = 500, 50, 5
POLICIES = {"p": {"algorithm": "sliding_log", "rate": "1000000/h", "key": "ip"}}


def identify(request: HttpRequest) -> str | None:
    return get_policy("p").identify(request)


def hit(identity: str | None) -> Any:
    return get_policy("p").hit(identity or "none")


async def plain(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit("p")
async def shipped(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


async def pool_hop(request: HttpRequest) -> HttpResponse:
    await sync_to_async(lambda: hit(identify(request)), thread_sensitive=False)()
    return HttpResponse("ok")


async def two_hops(request: HttpRequest) -> HttpResponse:
    identity = await sync_to_async(identify)(request)
    await sync_to_async(hit, thread_sensitive=False)(identity)
    return HttpResponse("ok")


VIEWS = {
    "no decision (floor)": plain,
    "@ratelimit: thread-sensitive hop": shipped,
    "alt: shared-pool hop": pool_hop,
    "alt: identity + pool (2 hops)": two_hops,
}
urls = types.ModuleType("bench_async_urls")
urls.urlpatterns = [path(f"v{i}/", view) for i, view in enumerate(VIEWS.values())]  # type: ignore[attr-defined]
sys.modules["bench_async_urls"] = urls


async def through_asgi(app: Any, url: str) -> tuple[float, float]:
    semaphore = asyncio.Semaphore(CONCURRENCY)

    async def one() -> None:
        async with semaphore:
            status, _ = await asgi_get(app, url)
            assert status == 200, status

    start, cpu = time.perf_counter(), time.thread_time()
    await asyncio.gather(*(one() for _ in range(REQUESTS)))
    return (time.perf_counter() - start) / REQUESTS, (time.thread_time() - cpu) / REQUESTS


async def through_test_client(url: str) -> tuple[float, float]:
    from django.test import AsyncClient

    client, semaphore = AsyncClient(), asyncio.Semaphore(CONCURRENCY)

    async def one() -> None:
        async with semaphore:
            assert (await client.get(url)).status_code == 200

    start, cpu = time.perf_counter(), time.thread_time()
    await asyncio.gather(*(one() for _ in range(REQUESTS)))
    return (time.perf_counter() - start) / REQUESTS, (time.thread_time() - cpu) / REQUESTS


def main() -> None:
    server = RedisServer()
    server.start()
    try:
        with override_settings(
            CACHES=caches_for(server.url),
            DJANGO_RL={"POLICIES": POLICIES},
            ROOT_URLCONF="bench_async_urls",
        ):
            from django.core.asgi import get_asgi_application

            app = get_asgi_application()
            client = server.client()
            start = time.perf_counter()
            for _ in range(2000):
                client.ping()
            ping = (time.perf_counter() - start) / 2000
            client.close()
            results: dict[tuple[str, str], list[tuple[float, float]]] = {}
            for _ in range(REPEATS):
                for i, name in enumerate(VIEWS):
                    url = f"/v{i}/"
                    results.setdefault(("ASGI handler", name), []).append(
                        asyncio.run(through_asgi(app, url))
                    )
                    results.setdefault(("AsyncClient", name), []).append(
                        asyncio.run(through_test_client(url))
                    )
    finally:
        server.close()
    print(f"redis-py PING round trip: {ping * 1e6:.0f} us")
    print(f"{REQUESTS} requests, {CONCURRENCY} at a time; medians of {REPEATS} interleaved runs")
    print(f"| {'served by':<12} | {'view':<34} | wall us/request | loop CPU us/request |")
    print(f"|{'-' * 14}|{'-' * 36}|-----------------|---------------------|")
    for (where, name), runs in sorted(
        results.items(), key=lambda item: item[0][0] != "ASGI handler"
    ):
        wall = statistics.median(r[0] for r in runs) * 1e6
        cpu = statistics.median(r[1] for r in runs) * 1e6
        print(f"| {where:<12} | {name:<34} | {wall:15.0f} | {cpu:19.0f} |")


if __name__ == "__main__":
    main()
