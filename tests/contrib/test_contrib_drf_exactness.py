"""Exactness under load through the DRF drop-in, on every topology: 16 threads and 4 processes.

As ``test_exactness.py``, through ``django_rl.contrib.drf.AnonRateThrottle``
at 100/hour: every round, 16 threads of this process and 4 spawned processes
make requests from one fresh address at once, a new throttle per request as
DRF makes them, far more often than the limit allows. The allowed requests
must add up to 100 exactly, every round (DRF's own throttle, a get then a
set on the cache, lets several times the limit through: bench/dropin_drf.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from tests.conftest import start_of_fresh_window
from tests.support import figures
from tests.support.races import (
    PROCESS_ATTEMPTS,
    PROCESSES,
    THREAD_ATTEMPTS,
    THREADS,
    WorkerPool,
    race,
    spawned_pool,
)
from tests.support.workers import drf_throttle_and_allow, serve_drf_rounds

pytestmark = pytest.mark.slow

LIMIT = 100
ROUNDS = 20
SECTION = (
    f"exactness under load through the DRF drop-in ({THREADS} threads x {THREAD_ATTEMPTS} + "
    f"{PROCESSES} processes x {PROCESS_ATTEMPTS} requests a round, limit {LIMIT}/hour)"
)


@pytest.fixture(scope="module")
def drf_pool(topology) -> Iterator[WorkerPool]:
    with spawned_pool(serve_drf_rounds, topology.caches()) as pool:
        yield pool


def play_round(pool: WorkerPool, allow, address: str) -> tuple[int, bool]:
    return race(pool, (address, PROCESS_ATTEMPTS), lambda: allow(address))


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
