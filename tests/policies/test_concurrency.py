"""Exactness under concurrency: threads and processes racing on one identity."""

from __future__ import annotations

import multiprocessing
import threading

import pytest

from django_rl import get_policy
from tests.support.workers import hammer_policy

pytestmark = pytest.mark.slow

POLICIES = {
    "fixed_window": {"algorithm": "fixed_window", "rate": "100/h", "key": "ip"},
    "sliding_log": {"algorithm": "sliding_log", "rate": "100/h", "key": "ip"},
    "token_bucket": {"algorithm": "token_bucket", "capacity": 100, "rate": "100/h", "key": "ip"},
}
IDENTITY = "ip:192.0.2.1"


@pytest.fixture(autouse=True)
def _away_from_window_edges(redis_client):
    from tests.conftest import start_of_fresh_window

    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=120_000)


@pytest.mark.parametrize("name", list(POLICIES))
def test_sixteen_threads_allow_exactly_the_limit(settings, name):
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    policy = get_policy(name)
    policy.peek("warm-up")
    barrier = threading.Barrier(16)
    allowed = [0] * 16

    def worker(index: int) -> None:
        barrier.wait()
        allowed[index] = sum(policy.hit(IDENTITY).allowed for _ in range(20))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(allowed) == 100
    assert policy.peek(IDENTITY).remaining == 0


def race_processes(redis_url, name, attempts, cost, processes=4):
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    results = context.Queue()
    readies = [context.Event() for _ in range(processes)]
    children = [
        context.Process(
            target=hammer_policy,
            args=(redis_url, POLICIES, name, IDENTITY, attempts, cost, ready, go, results),
        )
        for ready in readies
    ]
    for child in children:
        child.start()
    try:
        for ready in readies:
            assert ready.wait(60), "a child process did not start"
        go.set()
        counts = [results.get(timeout=60) for _ in children]
    finally:
        for child in children:
            child.join(30)
            if child.is_alive():
                child.kill()
    assert all(child.exitcode == 0 for child in children)
    return counts


@pytest.mark.parametrize("name", list(POLICIES))
def test_four_processes_allow_exactly_the_limit(redis_server, name):
    counts = race_processes(redis_server.url, name, attempts=50, cost=1)
    assert sum(counts) == 100


@pytest.mark.parametrize("name", ["sliding_log", "token_bucket"])
def test_four_processes_with_cost_allow_exactly_the_limit(redis_server, name):
    # 4 x 40 attempts of cost 3 against 100: 33 hits fit (99 units).
    counts = race_processes(redis_server.url, name, attempts=40, cost=3)
    assert sum(counts) == 33
