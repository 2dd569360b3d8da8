"""Exactness under load through the DRF drop-in, on every topology: 16 threads and 4 processes.

As ``test_exactness.py``, through ``django_rl.contrib.drf.AnonRateThrottle``
at 100/hour: every round, 16 threads of this process and 4 spawned processes
make requests from one fresh address at once, a new throttle per request as
DRF makes them, far more often than the limit allows. The allowed requests
must add up to 100 exactly, every round (DRF's own throttle, a get then a
set on the cache, lets several times the limit through: bench/dropin_drf.py).
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from tests import figures
from tests.conftest import start_of_fresh_window
from tests.test_exactness import PROCESS_ATTEMPTS, PROCESSES, THREAD_ATTEMPTS, THREADS, WorkerPool
from tests.workers import drf_throttle_and_allow, serve_drf_rounds

pytestmark = pytest.mark.slow

LIMIT = 100
ROUNDS = 20
SECTION = (
    f"exactness under load through the DRF drop-in ({THREADS} threads x {THREAD_ATTEMPTS} + "
    f"{PROCESSES} processes x {PROCESS_ATTEMPTS} requests a round, limit {LIMIT}/hour)"
)


@pytest.fixture(scope="module")
def drf_pool(topology) -> Iterator[WorkerPool]:
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(THREADS + PROCESSES)
    results = context.Queue()
    tasks = [context.Queue() for _ in range(PROCESSES)]
    children = [
        context.Process(target=serve_drf_rounds, args=(topology.caches(), q, results, start))
        for q in tasks
    ]
    for child in children:
        child.start()
    try:
        assert [results.get(timeout=60) for _ in children] == ["ready"] * PROCESSES
        yield WorkerPool(tasks, results, start)
    finally:
        for q in tasks:
            q.put(None)
        for child in children:
            child.join(30)
            if child.is_alive():
                child.kill()
                child.join()
    assert [child.exitcode for child in children] == [0] * PROCESSES


def play_round(pool: WorkerPool, allow, address: str) -> tuple[int, bool]:
    for q in pool.tasks:
        q.put((address, PROCESS_ATTEMPTS))
    allowed = [0] * THREADS
    spans = [(0.0, 0.0)] * THREADS

    def worker(index: int) -> None:
        pool.start.wait(60)
        began = time.time()
        allowed[index] = sum(allow(address) for _ in range(THREAD_ATTEMPTS))
        spans[index] = (began, time.time())

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    reports = [pool.results.get(timeout=60) for _ in pool.tasks]
    threads_began, threads_ended = min(s[0] for s in spans), max(s[1] for s in spans)
    overlapped = all(began < threads_ended and threads_began < ended for _, began, ended in reports)
    return sum(allowed) + sum(report[0] for report in reports), overlapped


def test_every_round_admits_exactly_the_limit(request, settings, topology, keyspace, drf_pool):
    settings.DJANGO_RL = {}
    allow = drf_throttle_and_allow()
    allow("192.0.2.254")
    totals, overlapped = [], 0
    for round_ in range(ROUNDS):
        start_of_fresh_window(keyspace, 3_600_000, min_left_ms=5_000)
        total, at_once = play_round(drf_pool, allow, f"198.51.100.{round_}")
        totals.append(total)
        overlapped += at_once
    figures.record(
        request.config,
        SECTION,
        f"{topology.name:<8}: {ROUNDS} rounds, admitted per round: "
        + ", ".join(f"{total} x{n}" for total, n in sorted(Counter(totals).items()))
        + f" (expected {LIMIT}); processes and threads overlapped in {overlapped}/{ROUNDS} rounds",
    )
    assert totals == [LIMIT] * ROUNDS
    assert overlapped >= ROUNDS // 2
