"""The django-ratelimit drop-in is exact under load: 16 threads and 4 processes on one key.

As tests/policies/test_exactness.py does for django_rl's policies, on every topology
(one server, a Redis Cluster, Sentinel): every round, all
20 workers call ``is_ratelimited(increment=True)`` for a fresh key of a
100/h limit together, far more often than it allows. Exactly 100 calls must
be allowed each round, and ``get_usage`` must count every call, denied ones
included (django-ratelimit's counting): 480 a round.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from django.test import RequestFactory

from django_rl.contrib.ratelimit import store
from django_rl.contrib.ratelimit.core import get_usage
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
from tests.support.workers_ratelimit import GROUP, RATE, hit, serve_rounds

pytestmark = pytest.mark.slow

LIMIT = 100
ROUNDS = 10


@pytest.fixture(scope="module")
def pool(topology) -> Iterator[WorkerPool]:
    with spawned_pool(serve_rounds, topology.caches()) as found:
        yield found


def play_round(pool: WorkerPool, identity: str) -> tuple[int, bool]:
    return race(pool, (identity, PROCESS_ATTEMPTS), lambda: hit(identity))


def test_every_round_admits_exactly_the_limit_and_counts_every_call(
    request, topology, keyspace, pool
):
    hit("warm-up")
    attempts = THREADS * THREAD_ATTEMPTS + PROCESSES * PROCESS_ATTEMPTS
    totals, overlapped = [], 0
    for round_ in range(ROUNDS):
        start_of_fresh_window(keyspace, 3_600_000, min_left_ms=5_000)
        identity = f"client-{round_}"
        total, at_once = play_round(pool, identity)
        totals.append(total)
        overlapped += at_once
        look = RequestFactory().get("/", HTTP_X_CLIENT=identity)
        usage = get_usage(look, group=GROUP, key="header:x-client", rate=RATE)
        assert (usage["count"], usage["should_limit"]) == (attempts, True)
    figures.record(
        request.config,
        f"exactness under load ({THREADS} threads x {THREAD_ATTEMPTS} + {PROCESSES} processes "
        f"x {PROCESS_ATTEMPTS} attempts a round, limit {LIMIT})",
        f"{topology.name:<8} django-ratelimit drop-in: {ROUNDS} rounds, admitted per round: "
        + ", ".join(f"{total} x{n}" for total, n in sorted(Counter(totals).items()))
        + f" (expected {LIMIT}); processes and threads overlapped in {overlapped}/{ROUNDS} rounds",
    )
    store.forget_policies()  # not listed by the admin in later tests
    assert totals == [LIMIT] * ROUNDS
    assert overlapped >= ROUNDS // 2
