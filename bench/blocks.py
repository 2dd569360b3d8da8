"""Policies with ``block_for`` and ``escalate`` against the same policies without them.

    python -m bench.blocks [--decisions N]

Part of ``bench.decisions`` (``make bench``); alone, it starts its own
redis-server and needs none of the peers.

Each algorithm's named policy of the speed table (``fw-1000000``, ...)
against its twin with ``block_for: "15m"`` and ``escalate: {"after": 3,
"within": "1h", "block_for": "1d"}`` (``fw-1000000-blocks``): every
decision allowed, the common case. Per pair: round trips and commands per
decision, and the time ratio of decisions drawn at random between the two.
The target (issue 31): within 10 %.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from bench.limiters import ALGORITHMS, policy_name
from bench.measure import Decide, alternating, commands_and_round_trips
from bench.runner import compare_main

COUNTED = 300


def compare(admin: Any, addresses: Sequence[str], *, decisions: int) -> dict[str, Any]:
    """Return, per algorithm, round trips, commands and the time ratio with blocks to without."""
    from django_rl import get_policy

    identities = [f"ip:{address}" for address in addresses]
    results: dict[str, Any] = {}
    for algorithm in ALGORITHMS:
        plain = policy_name(algorithm, 1_000_000)
        names = (plain, f"{plain}-blocks")
        rows: dict[str, Decide] = {}
        for name in names:
            hit = get_policy(name).hit
            rows[name] = lambda i, hit=hit: hit(identities[i]).allowed
        counts = {name: commands_and_round_trips(rows[name], COUNTED, admin)[:2] for name in names}
        samples = alternating(rows, decisions=decisions, population=len(addresses))
        alone = {name: samples[name].summary() for name in rows}
        ratio = alone[names[1]]["median_us"] / alone[plain]["median_us"]
        results[algorithm] = {
            "ratio": ratio,
            "cpu_ratio": alone[names[1]]["cpu_median_us"] / alone[plain]["cpu_median_us"],
            "median_us": {name: alone[name]["median_us"] for name in names},
            "commands": {name: counts[name][0] for name in names},
            "round_trips": {name: counts[name][1] for name in names},
        }
        print(
            f"{algorithm:>15}: with block_for + escalate {ratio:.3f}x "
            f"({alone[names[1]]['median_us']:.1f} vs {alone[plain]['median_us']:.1f} µs median); "
            f"round trips {counts[names[1]][1]:g} vs {counts[plain][1]:g}, commands "
            f"{counts[names[1]][0]:g} vs {counts[plain][0]:g} per decision"
        )
    return results


def main(argv: list[str] | None = None) -> int:
    return compare_main(__doc__ or "", compare, argv)


if __name__ == "__main__":
    sys.exit(main())
