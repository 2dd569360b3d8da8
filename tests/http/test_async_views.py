"""Async views: exact under concurrency, and the event loop stays free.

Decisions of async views run on the loop (``redis.asyncio``); a sync key
callable runs in ``sync_to_async`` (thread-sensitive). These tests show: 50
concurrent requests allow exactly the limit; the loop's CPU per decision is
bounded; a Redis that stalls does not stall the loop; and under Django's real
ASGI handler the sync key callables of concurrent requests run side by side,
in each request's own thread.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient

from tests.support.asgi import asgi_get
from tests.support.sf_headers import ratelimit

pytestmark = pytest.mark.urls("tests.sites.urls_http")
LIMIT = 20
POLICIES = {"single": {"algorithm": "sliding_log", "rate": f"{LIMIT}/m", "key": "ip"}}


@pytest.fixture(autouse=True)
def _policies(settings):
    settings.DJANGO_RL = {"POLICIES": POLICIES}


async def concurrently(url, n):
    client = AsyncClient()
    return await asyncio.gather(*(client.get(url) for _ in range(n)))


def test_fifty_concurrent_requests_allow_exactly_the_limit(redis_client):
    responses = async_to_sync(concurrently)("/single-async/", 50)
    codes = [r.status_code for r in responses]
    assert (codes.count(200), codes.count(429)) == (LIMIT, 50 - LIMIT)
    # Each allowed request was told a different count of what is left.
    left = sorted(ratelimit(r.headers)[1]["r"] for r in responses if r.status_code == 200)
    assert left == list(range(LIMIT))
    assert [key.decode() for key in redis_client.keys("rl:single:*")] == [
        key.decode() for key in redis_client.keys("rl:single:{ip:127.0.0.1}:*")
    ]
    (key,) = redis_client.keys("rl:single:*")
    assert redis_client.zcard(key) == LIMIT


def loop_cpu_per_request(url, n):
    """Return the event loop thread's CPU time per request, for n concurrent requests."""

    async def measure():
        start = time.thread_time()  # this coroutine runs in the loop's thread
        responses = await concurrently(url, n)
        return (time.thread_time() - start) / n, responses

    # The collector's pauses land on whichever code runs; keep them out.
    gc.collect()
    gc.disable()
    try:
        return async_to_sync(measure)()
    finally:
        gc.enable()


def test_the_loop_spends_little_cpu_per_decision(settings, redis_client, capsys):
    # All allowed: a 429 would add Django's own logging of 4xx answers.
    settings.DJANGO_RL = {"POLICIES": {"single": {**POLICIES["single"], "rate": "1000/m"}}}
    # Warm up both views (imports, the script load, the clock measurement).
    loop_cpu_per_request("/plain-async/", 10)
    loop_cpu_per_request("/single-async/", 10)
    rounds = []
    for _ in range(3):  # interleaved, so drift of a shared machine hits both alike
        baseline, _ = loop_cpu_per_request("/plain-async/", 100)
        limited, responses = loop_cpu_per_request("/single-async/", 100)
        assert [r.status_code for r in responses] == [200] * 100
        rounds.append((baseline, limited))
    baseline, limited = sorted(rounds, key=lambda r: r[1] - r[0])[1]  # the median round
    per_decision = limited - baseline
    with capsys.disabled():
        print(
            f"\n  event loop CPU per request: {baseline * 1e6:.0f} us without a limit, "
            f"{limited * 1e6:.0f} us with one: {per_decision * 1e6:.0f} us per decision"
        )
    # The decision runs on the loop (redis.asyncio's command path included);
    # 2 ms leaves room for a busy machine.
    assert per_decision < 0.002


def test_a_stalled_redis_does_not_stall_the_loop(redis_client):
    pause_ms = 1000

    async def run():
        gaps = []
        done = asyncio.Event()

        async def heartbeat():
            while not done.is_set():
                before = time.perf_counter()
                await asyncio.sleep(0.001)
                gaps.append(time.perf_counter() - before)

        beat = asyncio.create_task(heartbeat())
        await asyncio.sleep(0.01)
        # Write commands (EVALSHA too) wait for pause_ms: every decision is stuck.
        redis_client.client_pause(pause_ms, all=False)
        start = time.perf_counter()
        responses = await concurrently("/single-async/", 10)
        elapsed = time.perf_counter() - start
        done.set()
        await beat
        return responses, elapsed, max(gaps)

    responses, elapsed, longest_gap = async_to_sync(run)()
    assert [r.status_code for r in responses] == [200] * 10
    assert elapsed >= pause_ms / 1000 * 0.9  # the decisions did wait for Redis
    # Had a decision waited on the loop, the heartbeat would have stopped for
    # the whole pause; it kept beating (a busy machine gets a wide margin: a
    # 2-core machine running other suites stalled it 0.22 s once).
    assert longest_gap < pause_ms / 1000 / 2


SLOW_IDENTITY_SECONDS = 0.25
THREADS_SEEN: set[int] = set()


def slow_identity(request):
    """An identity function as slow as a database lookup of request.user can be."""
    THREADS_SEEN.add(threading.get_ident())
    time.sleep(SLOW_IDENTITY_SECONDS)
    return "user:slow"


def five_concurrent_decisions_take(settings, send, nested=True):
    """Time five concurrent requests whose identity function takes a while.

    ``nested``: run the loop under ``async_to_sync``, as sync tests usually
    do; thread-sensitive code then runs in the test's own thread. A server
    runs its loop at the top, like ``asyncio.run``.
    """
    settings.DJANGO_RL = {
        "POLICIES": {
            "single": {
                "algorithm": "sliding_log",
                "rate": "100/m",
                "key": "tests.http.test_async_views.slow_identity",
            }
        }
    }
    THREADS_SEEN.clear()

    async def run():
        start = time.perf_counter()
        results = await asyncio.gather(*(send() for _ in range(5)))
        return time.perf_counter() - start, results

    return async_to_sync(run)() if nested else asyncio.run(run())


def test_under_the_asgi_handler_requests_decide_side_by_side(settings):
    from django.core.asgi import get_asgi_application

    app = get_asgi_application()
    elapsed, results = five_concurrent_decisions_take(
        settings, lambda: asgi_get(app, "/single-async/"), nested=False
    )
    assert [status for status, _ in results] == [200] * 5
    # Each request decides in its own thread (ThreadSensitiveContext), so
    # five slow identity lookups overlap instead of queueing.
    assert len(THREADS_SEEN) == 5
    assert SLOW_IDENTITY_SECONDS <= elapsed < 3 * SLOW_IDENTITY_SECONDS


def test_without_a_thread_sensitive_context_sync_work_queues(settings):
    # Django's AsyncClient opens no ThreadSensitiveContext: all thread-sensitive
    # sync code of the process, the decisions included, shares one thread.
    client = AsyncClient()
    elapsed, responses = five_concurrent_decisions_take(
        settings, lambda: client.get("/single-async/")
    )
    assert [r.status_code for r in responses] == [200] * 5
    assert len(THREADS_SEEN) == 1
    assert elapsed >= 5 * SLOW_IDENTITY_SECONDS
