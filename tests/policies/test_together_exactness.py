"""Exactness of policies decided together, on every topology: 16 threads and 4 processes.

Every round all 20 workers hit a fresh identity through six policies at
once (``hit_many``: every algorithm, each with its own limit), far more often
than the tightest allows. The hits allowed must add up to the tightest
limit exactly (a token bucket of 100), every round; and, because a hit one
policy denies is counted by none, each other policy must have counted
exactly those hits: its remaining is its limit less them, to the unit.
Rounds of ``cost`` 3 admit 33 hits (99 units).

The identity's keys share its hash tag, so on the cluster all six are in
one slot: one script per hit there too. Rounds "across slots" hit each
policy on an identity of its own (other hash tags, other slots on the
cluster): reserved slot by slot, refunded when a later slot denies.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from tests.conftest import start_of_fresh_window
from tests.support import figures
from tests.support.races import PROCESS_ATTEMPTS, PROCESSES, THREADS, WorkerPool, race, spawned_pool
from tests.support.workers import ACROSS, TOGETHER, peek, policy_and_hit, serve_rounds

pytestmark = pytest.mark.slow

# The tightest last: across slots, the others are reserved before it denies,
# so every denial after the first 100 hits takes reservations back.
POLICIES = {
    "fixed": {"algorithm": "fixed_window", "rate": "200/h", "key": "ip"},
    "log": {"algorithm": "sliding_log", "rate": "150/h", "key": "ip"},
    "window": {"algorithm": "sliding_window", "rate": "130/h", "key": "ip"},
    "gcra": {"algorithm": "gcra", "burst": 120, "rate": "120/h", "key": "ip"},
    # Slots never given back here: a limit of 160 in flight, 100 taken.
    "conc": {"algorithm": "concurrency", "limit": 160, "timeout": 3600, "key": "ip"},
    "quota": {"algorithm": "quota", "limit": 110, "period": "day", "key": "ip"},
    "bucket": {"algorithm": "token_bucket", "capacity": 100, "rate": "100/h", "key": "ip"},
}
LIMITS = {
    "bucket": 100, "gcra": 120, "window": 130, "log": 150, "fixed": 200, "conc": 160, "quota": 110,
}  # fmt: skip
STACK = TOGETHER.join(POLICIES)
ROUNDS = 10


@pytest.fixture(scope="module")
def worker_pool(topology) -> Iterator[WorkerPool]:
    with spawned_pool(serve_rounds, topology.caches(), POLICIES) as pool:
        yield pool


@pytest.mark.parametrize("across", [False, True], ids=["one-slot", "across-slots"])
@pytest.mark.parametrize("cost", [1, 3])
def test_every_round_admits_the_tightest_limit_and_the_others_count_exactly_that(
    request, settings, topology, keyspace, worker_pool, cost, across
):
    """Across slots (each policy on an identity of its own): reserve and refund."""
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    stack = ACROSS + STACK if across else STACK
    _, hit = policy_and_hit(stack)
    hit("warm-up", 1)  # connect and load the script
    expected = 100 // cost
    totals = []
    overlapped = 0
    for round_ in range(ROUNDS):
        start_of_fresh_window(keyspace, 3_600_000, min_left_ms=5_000)
        identity = f"ip:198.51.{10 + cost}.{round_}"
        total, at_once = race(
            worker_pool,
            (stack, identity, PROCESS_ATTEMPTS, cost),
            lambda identity=identity: hit(identity, cost).allowed,
        )
        totals.append(total)
        overlapped += at_once
        identities = [f"{identity}/{i}" if across and i else identity for i in range(len(POLICIES))]
        left = {
            name: peek(policy_and_hit(name)[0], who).remaining
            for name, who in zip(POLICIES, identities, strict=True)
        }
        assert left == {name: limit - expected * cost for name, limit in LIMITS.items()}
    figures.record(
        request.config,
        f"exactness of policies decided together ({THREADS} threads + {PROCESSES} processes, "
        "7 algorithms, the tightest 100/h)",
        f"{topology.name:<8} {'across slots' if across else 'one slot':<12} cost {cost}: "
        f"{ROUNDS} rounds, admitted per round: "
        + ", ".join(f"{total} x{n}" for total, n in sorted(Counter(totals).items()))
        + f" (expected {expected}); every other policy counted exactly those",
    )
    assert totals == [expected] * ROUNDS
    assert overlapped >= ROUNDS // 2
