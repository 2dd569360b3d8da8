"""A full connection pool is not an outage: decisions beyond it share a connection.

redis-py's pool holds ``max_connections`` (django-redis'
``CONNECTION_POOL_KWARGS``; redis-py's default is 100). Each thread that
decides keeps one connection of it; a thread that finds the pool full shares
a connection another thread keeps (or waits for one, within the socket
timeout). These tests run many more threads than the pool holds, all deciding
at once for one identity: exactly the limit is allowed, nothing is degraded,
and nothing is logged. Before, the threads beyond the pool met redis-py's
"Too many connections", took it for an outage and followed fail_open.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time

import pytest
from django_redis import get_redis_connection

from django_rl import get_policy
from django_rl.backends.redis import get_backend
from django_rl.docs_urls import doc_url
from tests.support.asgi import asgi_get
from tests.support.redis_server import caches_for

POOL = 4
THREADS = 60
LIMIT = 20
_pools = itertools.count()
POLICIES = {
    "POLICIES": {
        "pooled": {"algorithm": "fixed_window", "rate": f"{LIMIT}/m", "key": "ip"},
        "logged": {"algorithm": "sliding_log", "rate": f"{LIMIT}/m", "key": "ip"},
    }
}


def use_pool(settings, redis_server, size: int, timeout: float) -> None:
    """Point CACHES at a new pool of ``size`` connections (django-redis keeps one per URL)."""
    url = f"{redis_server.url}?client_name=django_rl_pool_{next(_pools)}"
    settings.CACHES = caches_for(
        url, CONNECTION_POOL_KWARGS={"max_connections": size}, SOCKET_TIMEOUT=timeout
    )


@pytest.fixture
def small_pool(settings, redis_server):
    """CACHES on a pool of POOL connections, two policies at LIMIT per minute."""
    use_pool(settings, redis_server, POOL, timeout=5)
    settings.DJANGO_RL = POLICIES


def decide_at_once(policy_name: str, threads: int) -> list:
    """Return the Decisions of ``threads`` threads hitting one identity at once.

    Every thread is alive until all have decided, as the threads of a busy
    threaded server are: none gives its connection back to the pool early.
    """
    policy = get_policy(policy_name)
    start = threading.Barrier(threads)
    done = threading.Barrier(threads)
    decisions: list = []

    def decide() -> None:
        start.wait()
        decisions.append(policy.hit("ip:10.0.0.1"))
        done.wait()

    workers = [threading.Thread(target=decide) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return decisions


def lines(caplog) -> list[str]:
    """Return what logger ``django_rl`` logged (denials, on ``django_rl.denials``, aside)."""
    return [r.getMessage() for r in caplog.records if r.name == "django_rl"]


@pytest.mark.parametrize("policy_name", ["pooled", "logged"])
def test_threads_beyond_the_pool_decide_exactly(small_pool, caplog, policy_name):
    caplog.set_level(logging.INFO, logger="django_rl")
    decisions = decide_at_once(policy_name, THREADS)
    assert len(decisions) == THREADS
    assert sum(d.degraded for d in decisions) == 0
    assert sum(d.allowed for d in decisions) == LIMIT
    assert lines(caplog) == []  # no outage, no pool-exhausted line


@pytest.mark.urls("tests.sites.urls_pool")
def test_async_views_beyond_the_pool_decide_exactly(small_pool, caplog):
    # Django's real ASGI handler: each request decides in its own thread
    # (ThreadSensitiveContext), as under uvicorn; each holds it until its
    # response, so THREADS threads are alive at once.
    from django.core.asgi import get_asgi_application

    caplog.set_level(logging.INFO, logger="django_rl")
    app = get_asgi_application()

    async def requests():
        return await asyncio.gather(*(asgi_get(app, "/held/") for _ in range(THREADS)))

    # At the top, as a server runs its loop (under async_to_sync, thread-sensitive
    # code would all run in the test's own thread).
    statuses = [status for status, _ in asyncio.run(requests())]
    assert (statuses.count(200), statuses.count(429)) == (LIMIT, THREADS - LIMIT)
    assert lines(caplog) == []


@contextlib.contextmanager
def pool_held(settings, redis_server, timeout: float):
    """A pool of 2 connections, both taken by the application (as its own cache calls do).

    Yields a function that gives them back to the pool.
    """
    use_pool(settings, redis_server, 2, timeout=timeout)
    settings.DJANGO_RL = POLICIES
    pool = get_redis_connection("default").connection_pool
    taken = [pool.get_connection() for _ in range(2)]

    def give_back() -> None:
        while taken:
            pool.release(taken.pop())

    try:
        yield give_back
    finally:
        give_back()


def test_a_decision_waits_for_a_connection_the_application_gives_back(
    settings, redis_server, caplog
):
    caplog.set_level(logging.INFO, logger="django_rl")
    with pool_held(settings, redis_server, timeout=3) as give_back:
        timer = threading.Timer(0.1, give_back)
        timer.start()
        started = time.monotonic()
        decision = get_policy("pooled").hit("ip:10.0.0.2")
        waited = time.monotonic() - started
        timer.join()
    assert (decision.allowed, decision.degraded) == (True, False)
    assert decision.remaining == LIMIT - 1
    assert 0.1 <= waited < 3  # it waited for the connection, less than the socket timeout
    assert lines(caplog) == []


@pytest.fixture
def held_pool(settings, redis_server):
    with pool_held(settings, redis_server, timeout=0.5) as give_back:
        yield give_back


def test_no_connection_within_the_socket_timeout_is_logged_as_the_pool_not_an_outage(
    held_pool, caplog
):
    caplog.set_level(logging.INFO, logger="django_rl")
    policy = get_policy("pooled")
    started = time.monotonic()
    first, second = policy.hit("ip:10.0.0.3"), policy.hit("ip:10.0.0.3")
    waited = time.monotonic() - started
    assert [(d.allowed, d.degraded) for d in (first, second)] == [(True, True)] * 2  # fail_open
    assert 2 * 0.5 <= waited < 2 * 0.5 + 1  # each waited the socket timeout
    (line,) = lines(caplog)
    assert "had no connection of this process' pool free for a whole socket timeout" in line
    assert "PoolExhausted" in line and "max_connections" in line
    assert doc_url("reliability", "a-full-pool-is-not-an-outage") in line
    health = get_backend("default").health
    assert (health.down, dict(health.errors)) == (False, {"pool": 2})
    # Once the application gives its connections back, decisions are Redis's again.
    held_pool()
    third = policy.hit("ip:10.0.0.3")
    assert (third.allowed, third.degraded, third.remaining) == (True, False, LIMIT - 1)
    assert len(lines(caplog)) == 1  # and no "back" line: there was no outage


def test_a_thread_beyond_the_pool_waits_its_turn_on_a_busy_connection(
    settings, redis_server, redis_client
):
    # A pool of one connection, kept by a thread whose command keeps it busy
    # 0.3 s (BLPOP on an empty list: the server stays free for others). The
    # decision shares that connection: it waits for its turn, then decides.
    use_pool(settings, redis_server, 1, timeout=1)
    settings.DJANGO_RL = POLICIES
    policy = get_policy("pooled")
    node = get_backend("default").node_for(policy.key("ip:10.0.0.4"))

    def hold() -> None:
        client = node.client  # this thread's own: the pool's one connection
        client.blpop(["django_rl_test:empty"], timeout=0.5)

    holder = threading.Thread(target=hold)
    holder.start()
    while redis_client.info("clients")["blocked_clients"] == 0:  # until its BLPOP is under way
        time.sleep(0.005)
    started = time.monotonic()
    decision = policy.hit("ip:10.0.0.4")
    waited = time.monotonic() - started
    holder.join()
    assert (decision.allowed, decision.degraded, decision.remaining) == (True, False, LIMIT - 1)
    assert 0.1 <= waited < 1  # its turn came when the BLPOP ended
