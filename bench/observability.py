"""What seeing the limits costs: metrics (and history) per decision, and shadow mode's round trips.

    python -m bench.observability [--decisions N]

Part of ``bench.decisions`` (``make bench``); alone, it starts its own
redis-server and needs none of the peers.

The named fixed window of the speed table (``fw-1000000``), decided through
``Policy.hit_request`` as the front doors decide, with the observability
of a decision (metrics and history) turned off and on, decisions drawn at
random between the rows: the difference of the medians of this thread's
CPU time per decision is what they cost (target: at most 5 µs together,
docs/performance.md). On a busy machine that difference is within the
noise of a whole decision, so the counting calls are also timed alone
(:func:`counting_cpu_us`). The history's flushing thread does not run
during the timing: its work (one pipeline a second per process) is off the
decision path. And its twin in shadow mode (``fw-1000000-shadow``): the
same commands and round trips per decision.
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
OFF = "no metrics, no history"
ON = "metrics and history"


def compare(admin: Any, addresses: Sequence[str], *, decisions: int) -> dict[str, Any]:
    """Return the CPU per decision with metrics off and on, and shadow mode's round trips."""
    from django.test import RequestFactory

    from django_rl import get_policy
    from django_rl.observability import history, metrics

    factory = RequestFactory()
    requests = [factory.get("/", REMOTE_ADDR=address) for address in addresses]
    plain, shadow = get_policy(PLAIN), get_policy(SHADOW)
    if metrics.prometheus_client is None:
        raise SystemExit("bench.observability needs prometheus_client (the bench extra has it)")

    def switched(on: bool, policy: Any) -> Decide:
        def decide(i: int) -> bool:
            # Both rows pay for these assignments; only the flags differ.
            metrics._enabled = on
            history._enabled = on
            decision = policy.hit_request(requests[i])
            return decision is not None and decision.allowed

        return decide

    history.RECORDER.autostart = False  # flushed by hand, off the timing
    rows = {OFF: switched(False, plain), ON: switched(True, plain)}
    counts = {}
    for name, decide in (("plain", rows[ON]), ("shadow", switched(True, shadow))):
        commands, round_trips, _ = commands_and_round_trips(decide, COUNTED, admin)
        counts[name] = {"commands": commands, "round_trips": round_trips}
    samples = alternating(rows, decisions=decisions, population=len(addresses))
    alone = {name: samples[name].summary() for name in rows}
    metrics._enabled = history._enabled = None  # read from the settings again
    history.flush()
    counting = counting_cpu_us(plain.hit("ip:10.0.0.1"), shadow.hit("ip:10.0.0.2"))
    history.flush()
    results = {
        "policy": PLAIN,
        "decisions": decisions,
        "cpu_median_us": {name: alone[name]["cpu_median_us"] for name in rows},
        "median_us": {name: alone[name]["median_us"] for name in rows},
        "cpu_cost_us": alone[ON]["cpu_median_us"] - alone[OFF]["cpu_median_us"],
        "counting_cpu_us": counting,
        "shadow": counts,
    }
    print(
        f"\nPolicy.hit_request ({PLAIN}) with metrics and history against without, "
        f"{decisions:,} decisions "
        f"drawn at random between the two: CPU {alone[ON]['cpu_median_us']:.1f} vs "
        f"{alone[OFF]['cpu_median_us']:.1f} µs median per decision "
        f"({results['cpu_cost_us']:+.1f} µs); wall {alone[ON]['median_us']:.1f} vs "
        f"{alone[OFF]['median_us']:.1f} µs; the counting calls alone {counting:.2f} µs of CPU. "
        f"Shadow mode ({SHADOW}): "
        f"{counts['shadow']['round_trips']:g} round trips and {counts['shadow']['commands']:g} "
        f"commands per decision, against {counts['plain']['round_trips']:g} and "
        f"{counts['plain']['commands']:g} enforced"
    )
    return results


def counting_cpu_us(allowed: Any, shadowed: Any) -> float:
    """Return the CPU µs that counting one decision in the metrics and the history takes.

    What ``Policy.hit`` adds once the decision is made: ``count_decision``
    and the history's ``record``, timed alone on real Decisions (one allowed,
    one shadow-denied in turn), best of 5 runs of 20,000.
    """
    import dataclasses
    import time

    from django_rl.observability.history import record
    from django_rl.observability.metrics import count_decision

    denied = dataclasses.replace(shadowed, allowed=False)
    runs = []
    for _ in range(5):
        started = time.thread_time_ns()
        for _step in range(10_000):
            count_decision(PLAIN, allowed)
            record(PLAIN, allowed, "ip:10.0.0.1")
            count_decision(SHADOW, denied)
            record(SHADOW, denied, "ip:10.0.0.2")
        runs.append((time.thread_time_ns() - started) / 20_000 / 1000)
    return min(runs)


def main(argv: list[str] | None = None) -> int:
    return compare_main(__doc__ or "", compare, argv)


if __name__ == "__main__":
    sys.exit(main())
