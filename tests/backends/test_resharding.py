"""A slot moving under traffic: every hit still counted once, on the node that holds its keys.

While a reshard moves a slot, its keys are on the source until their batch
is migrated, then on the target; the source answers ``ASK`` for a key it
does not have, and only a command preceded by ``ASKING`` reaches the key on
the target. Decisions must follow it: an identity already at its limit stays
denied, a new identity gets exactly its limit, and no decision is degraded.

Slot 0 moves (the lowest slot of its owner: the one
``redis-cli --cluster reshard --cluster-slots 1`` takes), full of filler
keys, while 8 threads hit fresh identities of that slot together, round
after round, with the deny cache off so that every hit reaches Redis. Each
test gives the slot back to its owner, empty, and waits until every node
agrees (``tests/support/resharding.py``).
"""

from __future__ import annotations

import io
import logging
import math
import time

import pytest
from django.core.management import call_command

from django_rl import get_policy
from django_rl.backends import get_backend
from django_rl.inspection import Query, list_counters
from tests.conftest import start_of_fresh_window
from tests.support import figures
from tests.support.resharding import (
    Rounds,
    SlotMove,
    each_round,
    fill,
    first_slot,
    identities_in_slot,
    reshard_with_redis_cli,
    restore,
)

pytestmark = [pytest.mark.topologies, pytest.mark.slow]

LIMIT = 20
POLICIES = {
    # A day's window, entered with WINDOW_MARGIN_MS left (moving_slot): a
    # window that ended mid-test would let a round admit twice its limit.
    "fw": {"algorithm": "fixed_window", "rate": f"{LIMIT}/d", "key": "ip"},
    "sl": {"algorithm": "sliding_log", "rate": f"{LIMIT}/h", "key": "ip"},
    # Fails closed: a hit it cannot count is refused (an under-admission).
    "tb": {
        "algorithm": "token_bucket",
        "capacity": LIMIT,
        "rate": f"{LIMIT}/h",
        "key": "ip",
        "fail_open": False,
    },
}
THREADS = 8
#: Hits of each policy per thread per round: 40 a round, twice the limit.
ATTEMPTS = 5
FILLER_KEYS = 30_000
DAY_MS = 86_400_000
#: Left in the fixed window when a test starts: more than a test takes.
WINDOW_MARGIN_MS = 300_000
SECTION = (
    f"resharding under traffic ({THREADS} threads, a slot of {FILLER_KEYS:,} keys, limit {LIMIT})"
)


@pytest.fixture
def moving_slot(settings, redis_cluster, caplog):
    """Slot 0 with its owner (the source) and another primary (the target); restored after."""
    caplog.set_level(logging.INFO, logger="django_rl")
    redis_cluster.flush()
    settings.CACHES = redis_cluster.caches()
    settings.DJANGO_RL = {"KEY_PREFIX": "m", "DENY_CACHE_SIZE": 0, "POLICIES": POLICIES}
    slot, source, target = first_slot(redis_cluster)
    clock = redis_cluster.primary_servers()[0].client()
    try:
        start_of_fresh_window(clock, DAY_MS, min_left_ms=WINDOW_MARGIN_MS)
    finally:
        clock.close()
    try:
        yield slot, source, target
    finally:
        restore(redis_cluster, slot, source)


def at_limit(identity: str) -> None:
    for name in POLICIES:
        assert [get_policy(name).hit(identity).allowed for _ in range(LIMIT)] == [True] * LIMIT


def summary(rounds: Rounds) -> tuple[str, list[tuple[int, str, int, int]], int, int]:
    """Return the rounds in words, the wrong ones, and what the steady identity was allowed.

    A round is right when each policy allowed exactly the limit, and no
    decision was degraded; the steady identity, at its limit, must be
    allowed nothing (and nothing degraded).
    """
    # A round cut short by the end of the run (some threads stopped before
    # they made their hits) is no round: only those every thread finished.
    totals = [t for t in each_round(rounds.made) if t[0] < rounds.finished_rounds]
    wrong = [
        (n, p, allowed, degraded)
        for n, p, allowed, degraded in totals
        if (allowed, degraded) != (LIMIT, 0)
    ]
    over = sum(allowed for _, allowed, _ in rounds.held)
    degraded = sum(d for _, _, d in rounds.held)
    words = (
        f"{len(wrong)} of {len(totals)} rounds x policies not exactly {LIMIT} of "
        f"{THREADS * ATTEMPTS} ({sum(a for *_, a, _ in wrong) - LIMIT * len(wrong):+d} allowed, "
        f"{sum(d for *_, d in wrong)} degraded); the identity at its limit allowed {over} of "
        f"{len(rounds.held)} more times ({degraded} degraded)"
    )
    return words, wrong, over, degraded


def unavailable_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "unavailable" in r.getMessage()]


def test_a_reshard_by_redis_cli_counts_every_hit_exactly(
    request, redis_cluster, moving_slot, caplog
):
    slot, source, target = moving_slot
    steady, *fresh = identities_in_slot(slot, 200)
    at_limit(steady)
    fill(source, steady, FILLER_KEYS)
    with Rounds(fresh, list(POLICIES), THREADS, ATTEMPTS, steady=steady) as rounds:
        rounds.wait_rounds(2)
        before = rounds.finished_rounds
        took = reshard_with_redis_cli(redis_cluster, source, target)
        during = rounds.finished_rounds - before
        rounds.wait_rounds(2)
    words, wrong, over, degraded = summary(rounds)
    figures.record(
        request.config,
        SECTION,
        f"redis-cli --cluster reshard: {took:.2f} s, {during} rounds during it; {words}",
    )
    assert redis_cluster.server_of_slot(slot) is target
    assert during >= 1, "no round ran while the slot moved"
    assert (wrong, over, degraded) == ([], 0, 0)
    assert unavailable_lines(caplog) == []


def test_a_slot_held_in_migrating_counts_every_hit_exactly(
    request, redis_cluster, moving_slot, caplog
):
    slot, source, target = moving_slot
    steady, *fresh = identities_in_slot(slot, 200)
    at_limit(steady)
    fill(source, steady, FILLER_KEYS // 3)
    move = SlotMove(redis_cluster, slot, source, target)
    backend = get_backend("default")
    sources = [backend.node_for(get_policy(name).key(steady)) for name in POLICIES]
    target_client, source_client = target.client(), source.client()
    try:
        with Rounds(fresh, list(POLICIES), THREADS, ATTEMPTS, steady=steady) as rounds:
            rounds.wait_rounds(2)
            move.begin()
            # The steady identity's keys move first under two policies; its
            # token bucket stays on the source until the rest of the slot moves.
            move.migrate_keys(
                [k for name in ("fw", "sl") for k in keys_of(get_policy(name), steady, source)]
            )
            move.migrate(keys=FILLER_KEYS // 6)
            connections = stat(target_client, "total_connections_received")
            reads = [cluster_slots_calls(s.client()) for s in redis_cluster.live()]
            before = rounds.finished_rounds
            time.sleep(1.0)  # held half-way, MIGRATING, under traffic
            held_rounds = rounds.finished_rounds - before
            new_connections = stat(target_client, "total_connections_received") - connections
            topology_reads = sum(
                cluster_slots_calls(s.client()) for s in redis_cluster.live()
            ) - sum(reads)
            move.migrate(pause=0.002)
            move.finish()
            rounds.wait_rounds(2)
    finally:
        target_client.close()
        source_client.close()
    words, wrong, over, degraded = summary(rounds)
    figures.record(
        request.config,
        SECTION,
        f"held in MIGRATING 1 s: {held_rounds} rounds meanwhile; {words}; "
        f"{new_connections} new connections to the target, {topology_reads} topology reads",
    )
    assert held_rounds >= 1, "no round ran while the slot was held"
    assert (wrong, over, degraded) == ([], 0, 0)
    # One kept connection per thread reaches the target: none per ASK. An
    # ASK is no reason to read the topology: it does not change.
    assert new_connections <= THREADS
    assert topology_reads == 0
    assert unavailable_lines(caplog) == []
    assert all(sum(node.health.errors.values()) == 0 for node in backend.nodes() + sources)


def test_peek_reset_inspect_and_the_admin_during_a_migration(redis_cluster, moving_slot, caplog):
    # Under traffic on other identities of the slot: an identity whose keys
    # are still on the source (A), one whose keys moved (B), a new one (C).
    slot, source, target = moving_slot
    a, b, c, *fresh = identities_in_slot(slot, 200)
    for identity in (a, b):
        for name in POLICIES:
            for _ in range(3):
                get_policy(name).hit(identity)
    move = SlotMove(redis_cluster, slot, source, target)
    with Rounds(fresh, list(POLICIES), 4, ATTEMPTS) as rounds:
        rounds.wait_rounds(1)
        move.begin()
        move.migrate_keys([k for name in POLICIES for k in keys_of(get_policy(name), b, source)])
        rounds.wait_rounds(1)
        peeked = {
            (name, who): get_policy(name).peek(identity).remaining
            for name in POLICIES
            for who, identity in (("a", a), ("b", b), ("c", c))
        }
        out = io.StringIO()
        call_command("ratelimit", "inspect", "fw", b, stdout=out)
        inspected = out.getvalue()
        listed = {
            # Whole: a token bucket refills a little meanwhile.
            (row.policy, str(row.identity)): math.ceil(row.used)
            for row in list_counters(Query(identity=a, exact=True)).rows
            + list_counters(Query(identity=b, exact=True)).rows
        }
        scanned = list_counters(Query(policy="sl", identity="ip:10.")).rows
        reset = {name: get_policy(name).reset(identity) for name in POLICIES for identity in (a,)}
        reset_b = {name: get_policy(name).reset(b) for name in POLICIES}
        after = {name: get_policy(name).peek(b).remaining for name in POLICIES}
        rounds.wait_rounds(1)
    _, wrong, _, _ = summary(rounds)
    assert wrong == []
    assert peeked == {
        (name, who): LIMIT - (3 if who != "c" else 0) for name in POLICIES for who in "abc"
    }
    assert "remaining    17" in inspected and "string" in inspected
    assert listed == {(name, identity): 3 for name in POLICIES for identity in (a, b)}
    assert {str(row.identity) for row in scanned} >= {a, b}
    assert reset == {"fw": 1, "sl": 1, "tb": 1} and reset_b == {"fw": 1, "sl": 1, "tb": 1}
    assert after == {name: LIMIT for name in POLICIES}
    # TRYAGAIN (a DEL of keys of which the source has some) is no outage.
    assert unavailable_lines(caplog) == []


def keys_of(policy, identity: str, server) -> list[str]:
    """Return the keys of ``identity`` under ``policy`` that exist on ``server``."""
    client = server.client()
    try:
        pattern = policy.key(identity) + "*"
        return [k.decode() for k in client.scan_iter(match=pattern, count=1000)]
    finally:
        client.close()


def stat(client, name: str) -> int:
    return int(client.info("stats")[name])


def cluster_slots_calls(client) -> int:
    try:
        stats = client.info("commandstats")
        return int(stats.get("cmdstat_cluster|slots", {}).get("calls", 0))
    finally:
        client.close()


def test_async_decisions_follow_ask_with_asking(redis_cluster, moving_slot, caplog):
    # On the loop (Policy.ahit, its auto-pipelined connection): an identity
    # whose keys moved to the target (B) and a new one (C), while the slot is
    # MIGRATING, are counted on the target (ASKING in the same write), each
    # hit once; one whose keys are still on the source (A) is counted there.
    import asyncio

    slot, source, target = moving_slot
    a, b, c = identities_in_slot(slot, 3)
    for identity in (a, b):
        for name in POLICIES:
            for _ in range(3):
                get_policy(name).hit(identity)
    move = SlotMove(redis_cluster, slot, source, target)
    move.begin()
    move.migrate_keys([k for name in POLICIES for k in keys_of(get_policy(name), b, source)])

    async def hits() -> dict[tuple[str, str], list[int]]:
        # (Loops: Python 3.10 takes no await in a comprehension nested in another.)
        found: dict[tuple[str, str], list[int]] = {}
        for name in POLICIES:
            for who, identity in (("a", a), ("b", b), ("c", c)):
                found[name, who] = []
                for _ in range(2):
                    found[name, who].append((await get_policy(name).ahit(identity)).remaining)
        return found

    decided = asyncio.run(hits())
    expected = {
        (name, who): [LIMIT - start - 1, LIMIT - start - 2]
        for name in POLICIES
        for who, start in (("a", 3), ("b", 3), ("c", 0))
    }
    assert decided == expected
    for name in POLICIES:
        assert keys_of(get_policy(name), b, source) == []  # counted on the target
        assert keys_of(get_policy(name), c, target) != []
        assert keys_of(get_policy(name), a, source) != []
    assert unavailable_lines(caplog) == []
