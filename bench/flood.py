"""A flood from one denied client: the local deny cache against asking Redis every time.

For each algorithm, one client uses up its limit of 100 a year, then floods. The
same policy answers with its deny cache, and a twin of it without one (every
hit asks Redis), interleaved with PING. Commands per denied decision are
counted over the whole flood, from its first denied hit.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import redis

from bench.limiters import ALGORITHMS, policy_name
from bench.measure import (
    SendCounter,
    command_calls,
    commands_and_round_trips,
    interleaved,
    ratio,
)

FLOOD_DECISIONS = 20_000
UNCACHED_DECISIONS = 2_000
#: How long the sustained flood lasts: long enough for the reset token's reads.
SUSTAINED_SECONDS = 5.0


def flood(server: redis.Redis, *, rounds: int, batch: int) -> dict[str, Any]:
    from django_rl import get_policy
    from django_rl.backends import get_backend

    client = get_backend("default").pooled_client  # the yardstick, as in the speed table
    rows: dict[str, Any] = {"PING": lambda i: client.ping()}
    counted: dict[str, Any] = {}
    for index, algorithm in enumerate(ALGORITHMS):
        cached = get_policy(f"{policy_name(algorithm, 100)}-flood")
        uncached = copy.copy(cached)
        uncached.denials = None
        identity = f"ip:192.0.2.{index}"
        for _ in range(100):
            assert cached.hit(identity).allowed
        # The first denied hit asks Redis and fills the cache; it is counted.
        for name, policy, decisions in (
            (f"{algorithm}: denied, deny cache", cached, FLOOD_DECISIONS),
            (f"{algorithm}: denied, no deny cache", uncached, UNCACHED_DECISIONS),
        ):
            rows[name] = _denied(policy, identity)
            commands, round_trips, _ = commands_and_round_trips(rows[name], decisions, server)
            counted[name] = {"commands": commands, "round_trips": round_trips}
    samples = interleaved(rows, rounds=rounds, batch=batch, population=1)
    results: dict[str, Any] = {"decisions_counted": FLOOD_DECISIONS, "rows": {}}
    for name, sample in samples.items():
        results["rows"][name] = {
            **sample.summary(),
            "ping_ratio": ratio(samples, name, "PING"),
            **counted.get(name, {}),
        }
    return results


def sustained(server: redis.Redis, seconds: float = SUSTAINED_SECONDS) -> dict[str, Any]:
    """Flood one used-up client for ``seconds``; return the Redis cost per denied hit.

    A deny cache trusts its entries for 1 s after each read of the reset
    token (``reset_epoch.py``): over a flood of several seconds, what
    resets cost a process is those reads, at most one a second. Counted as
    redis-py sends of this process, and as commands the server ran
    (``INFO commandstats``, script internals included).
    """
    import time

    from django_rl import get_policy

    policy = get_policy(f"{policy_name('sliding_log', 100)}-flood")
    identity = "ip:192.0.2.250"
    for _ in range(100):
        assert policy.hit(identity).allowed
    # The process's first denial reads the token (the baseline); the next is remembered.
    assert [policy.hit(identity).allowed for _ in range(2)] == [False, False]
    assert policy.denials is not None
    reads = policy.denials.token_reads
    counter = SendCounter()
    before = command_calls(server)
    denied = 0
    with counter.counting():
        started = time.monotonic()
        end = started + seconds
        while time.monotonic() < end:
            for _ in range(100):
                assert not policy.hit(identity).allowed
            denied += 100
        elapsed = time.monotonic() - started
        sends = counter.sends
    after = command_calls(server)
    ran = sum(n - before.get(name, 0) for name, n in after.items() if name != "info")
    token_reads = policy.denials.token_reads - reads
    return {
        "seconds": round(elapsed, 2),
        "denied": denied,
        "denied_per_second": denied / elapsed,
        "round_trips": sends,
        "round_trips_per_denied": sends / denied,
        "commands_ran": ran,
        "commands_per_denied": ran / denied,
        "token_reads": token_reads,
        "token_reads_per_second": token_reads / elapsed,
    }


def _denied(policy: Any, identity: str) -> Any:
    hit = policy.hit

    def decide(i: int) -> bool:
        decision = hit(identity)
        assert not decision.allowed
        return False

    return decide


def flood_rows(results: Mapping[str, Any]) -> list[list[str]]:
    """Return table rows: name, µs, spread, x PING, commands and round trips per decision."""
    table = []
    for name, row in results["rows"].items():
        table.append(
            [
                name,
                f"{row['median_us']:.2f}",
                f"{row['p25_us']:.2f}-{row['p75_us']:.2f}",
                f"{row['ping_ratio']:.3f}",
                f"{row['commands']:.5f}" if "commands" in row else "",
                f"{row['round_trips']:.5f}" if "round_trips" in row else "",
            ]
        )
    return table


def sustained_row(row: Mapping[str, Any]) -> list[str]:
    """Return the table row of :func:`sustained`."""
    return [
        f"{row['seconds']:.1f}",
        f"{row['denied']:,}",
        f"{row['denied_per_second']:,.0f}",
        str(row["round_trips"]),
        f"{row['round_trips_per_denied']:.6f}",
        f"{row['token_reads_per_second']:.2f}",
    ]
