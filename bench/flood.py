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
from bench.measure import commands_and_round_trips, interleaved, ratio

FLOOD_DECISIONS = 20_000
UNCACHED_DECISIONS = 2_000


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
