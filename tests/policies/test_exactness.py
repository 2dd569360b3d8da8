"""Exactness under load, on every topology: 16 threads and 4 processes at once on one identity.

Every round all 20 workers hit a fresh identity of a 100/h policy together
(each algorithm; an inline policy, as ``@ratelimit(rate="100/h")`` makes it;
a policy with per-plan rates, hit with a request its rate function reads),
far more often than the limit allows. The allowed hits must add up to the
limit exactly, every round: one more is an over-admission (a race let a hit
through), one fewer an under-admission (a race lost a hit). Rounds with
``cost`` 3 must admit 33 hits (99 of the 100 units).

Identities are fresh each round and the limits count per hour, so no refill
or window edge can change the expected count: token buckets refill one token
per 36 s, and fixed-window rounds start at least 5 s before the hour ends on
the Redis clock. The 4 processes are spawned once per topology and serve
every round of it.
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
from tests.support.workers import peek, policy_and_hit, serve_rounds

pytestmark = pytest.mark.slow

POLICIES = {
    "fixed_window": {"algorithm": "fixed_window", "rate": "100/h", "key": "ip"},
    "sliding_log": {"algorithm": "sliding_log", "rate": "100/h", "key": "ip"},
    "token_bucket": {"algorithm": "token_bucket", "capacity": 100, "rate": "100/h", "key": "ip"},
    "gcra": {"algorithm": "gcra", "burst": 100, "rate": "100/h", "key": "ip"},
    "sliding_window": {"algorithm": "sliding_window", "rate": "100/h", "key": "ip"},
    "quota": {"algorithm": "quota", "limit": 100, "period": "day", "key": "ip"},
    # 100 in flight at once; no hit gives its slots back, and none ends in the hour.
    "concurrency": {"algorithm": "concurrency", "limit": 100, "timeout": 3600, "key": "ip"},
    # Per-plan rates: the rate function gives every request 100/h.
    "per_plan": {"algorithm": "sliding_log", "rate": "tests.support.plans.exact_rate", "key": "ip"},
}
#: Besides those: "inline", the fixed window @ratelimit(rate="100/h", key="ip") makes.
NAMES = [*POLICIES, "inline"]
#: The algorithm of each name.
ALGORITHM = {**{n: spec["algorithm"] for n, spec in POLICIES.items()}, "inline": "fixed_window"}
LIMIT = 100
ROUNDS = 30
SECTION = (
    f"exactness under load ({THREADS} threads x {THREAD_ATTEMPTS} + {PROCESSES} processes "
    f"x {PROCESS_ATTEMPTS} attempts a round, limit {LIMIT})"
)


@pytest.fixture(scope="module")
def worker_pool(topology) -> Iterator[WorkerPool]:
    with spawned_pool(serve_rounds, topology.caches(), POLICIES) as pool:
        yield pool


def play_round(pool: WorkerPool, name: str, identity: str, cost: int) -> tuple[int, bool]:
    """Hit ``identity`` from every thread and process at once (``tests/support/races.py``)."""
    _, hit = policy_and_hit(name)
    return race(pool, (name, identity, PROCESS_ATTEMPTS, cost), lambda: hit(identity, cost).allowed)


@pytest.mark.parametrize("cost", [1, 3])
@pytest.mark.parametrize("name", NAMES)
def test_every_round_admits_exactly_the_limit(
    request, settings, topology, keyspace, worker_pool, name, cost
):
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    policy, _ = policy_and_hit(name)
    peek(policy, "warm-up")
    expected = LIMIT // cost
    totals = []
    overlapped = 0
    for round_ in range(ROUNDS):
        start_of_fresh_window(keyspace, 3_600_000, min_left_ms=5_000)
        identity = f"ip:198.51.{cost}.{round_}"
        total, at_once = play_round(worker_pool, name, identity, cost)
        totals.append(total)
        overlapped += at_once
        # Denied hits count in a fixed window (its documented policy); the
        # others leave the unused unit.
        left = 0 if ALGORITHM[name] == "fixed_window" else LIMIT - expected * cost
        assert peek(policy, identity).remaining == left
    figures.record(
        request.config,
        SECTION,
        f"{topology.name:<8} {name:<12} cost {cost}: {ROUNDS} rounds, admitted per round: "
        + ", ".join(f"{total} x{n}" for total, n in sorted(Counter(totals).items()))
        + f" (expected {expected}); processes and threads overlapped in "
        f"{overlapped}/{ROUNDS} rounds",
    )
    assert totals == [expected] * ROUNDS
    assert overlapped >= ROUNDS // 2  # the rounds were races, not queues
