"""What seeing the limits costs: metrics (and history) per decision, and shadow mode's round trips.

    python -m bench.observability [--decisions N]

Part of ``bench.decisions`` (``make bench``); alone, it starts its own
redis-server and needs none of the peers.

The named fixed window of the speed table (``fw-1000000``), decided through
``Policy.hit_request`` as the front doors decide, with the observability
of a decision turned off and on, decisions drawn at random between the
rows: the difference of the medians of this thread's CPU time per decision
is what metrics cost (target: at most 5 µs with the history together,
docs/performance.md). And its twin in shadow mode (``fw-1000000-shadow``):
the same commands and round trips per decision.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from bench.measure import Decide, alternating, commands_and_round_trips
from bench.runner import compare_main

PLAIN = "fw-1000000"
SHADOW = "fw-1000000-shadow"
COUNTED = 300
OFF = "no metrics"
ON = "metrics"


def compare(admin: Any, addresses: Sequence[str], *, decisions: int) -> dict[str, Any]:
    """Return the CPU per decision with metrics off and on, and shadow mode's round trips."""
    from django.test import RequestFactory

    from django_rl import get_policy
    from django_rl.observability import metrics

    factory = RequestFactory()
    requests = [factory.get("/", REMOTE_ADDR=address) for address in addresses]
    plain, shadow = get_policy(PLAIN), get_policy(SHADOW)
    if metrics.prometheus_client is None:
        raise SystemExit("bench.observability needs prometheus_client (the bench extra has it)")

    def switched(on: bool, policy: Any) -> Decide:
        def decide(i: int) -> bool:
            # Both rows pay for this assignment; only the flag differs.
            metrics._enabled = on
            decision = policy.hit_request(requests[i])
            return decision is not None and decision.allowed

        return decide

    rows = {OFF: switched(False, plain), ON: switched(True, plain)}
    counts = {}
    for name, decide in (("plain", rows[ON]), ("shadow", switched(True, shadow))):
        commands, round_trips, _ = commands_and_round_trips(decide, COUNTED, admin)
        counts[name] = {"commands": commands, "round_trips": round_trips}
    samples = alternating(rows, decisions=decisions, population=len(addresses))
    alone = {name: samples[name].summary() for name in rows}
    metrics._enabled = None  # read from the settings again
    results = {
        "policy": PLAIN,
        "decisions": decisions,
        "cpu_median_us": {name: alone[name]["cpu_median_us"] for name in rows},
        "median_us": {name: alone[name]["median_us"] for name in rows},
        "cpu_cost_us": alone[ON]["cpu_median_us"] - alone[OFF]["cpu_median_us"],
        "shadow": counts,
    }
    print(
        f"\nPolicy.hit_request ({PLAIN}) with metrics against without, {decisions:,} decisions "
        f"drawn at random between the two: CPU {alone[ON]['cpu_median_us']:.1f} vs "
        f"{alone[OFF]['cpu_median_us']:.1f} µs median per decision "
        f"({results['cpu_cost_us']:+.1f} µs); wall {alone[ON]['median_us']:.1f} vs "
        f"{alone[OFF]['median_us']:.1f} µs. Shadow mode ({SHADOW}): "
        f"{counts['shadow']['round_trips']:g} round trips and {counts['shadow']['commands']:g} "
        f"commands per decision, against {counts['plain']['round_trips']:g} and "
        f"{counts['plain']['commands']:g} enforced"
    )
    return results


def main(argv: list[str] | None = None) -> int:
    return compare_main(__doc__ or "", compare, argv)


if __name__ == "__main__":
    sys.exit(main())
