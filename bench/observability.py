"""What metrics and history cost a decision, and what shadow mode adds: same policy, same run.

    python -m bench.observability [--decisions N]

Part of ``bench.decisions`` (``make bench``); alone, it starts its own
redis-server and needs none of the peers.

Rows, drawn at random decision by decision (``measure.alternating``):

* ``Policy.hit``: the named fixed window of the speed table (``fw-1000000``)
  as a site runs it, its decision counted in the Prometheus metrics (when
  ``prometheus_client`` is installed) and in the history;
* ``without metrics and history``: the same policy object's decision alone
  (``Policy._hit_identity``, what ``hit`` calls before it counts);
* ``shadow``: its twin in shadow mode (``fw-1000000-shadow``), counted too.

The difference of the first two medians of worker CPU is what metrics and
history cost per decision (target: at most 5 µs together). The history's
flushing thread is not run during the timing: its work (one pipeline a
second per process) is off the decision path, and stated in
docs/observability.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from bench.measure import Decide, alternating, commands_and_round_trips

PLAIN = "fw-1000000"
SHADOW = "fw-1000000-shadow"
COUNTED = 300


def compare(admin: Any, addresses: Sequence[str], *, decisions: int) -> dict[str, Any]:
    """Return the CPU and time per decision of each row, and the round trips of each."""
    from django_rl import get_policy
    from django_rl.observability import history, metrics

    history.RECORDER.autostart = False  # flushed by hand below, off the timing
    identities = [f"ip:{address}" for address in addresses]
    plain, shadow = get_policy(PLAIN), get_policy(SHADOW)
    rows: dict[str, Decide] = {
        "Policy.hit": lambda i: plain.hit(identities[i]).allowed,
        "without metrics and history": lambda i: plain._hit_identity(identities[i]).allowed,
        "shadow": lambda i: shadow.hit(identities[i]).allowed,
    }
    trips = {}
    for name, decide in rows.items():
        commands, round_trips, _ = commands_and_round_trips(decide, COUNTED, admin)
        trips[name] = {"commands": commands, "round_trips": round_trips}
    history.flush()
    samples = alternating(rows, decisions=decisions, population=len(addresses))
    history.flush()
    alone = {name: samples[name].summary() for name in rows}
    cpu = {name: alone[name]["cpu_median_us"] for name in rows}
    counting = counting_cpu_us(plain.hit(identities[0]), shadow.hit(identities[0]))
    history.flush()
    results = {
        "decisions": decisions,
        "metrics_on": metrics.metrics() is not None,
        "cpu_median_us": cpu,
        "median_us": {name: alone[name]["median_us"] for name in rows},
        "rows_difference_us": cpu["Policy.hit"] - cpu["without metrics and history"],
        "cost_us": counting,
        **{key: {name: trips[name][key] for name in rows} for key in ("commands", "round_trips")},
    }
    print(
        f"\nMetrics{'' if results['metrics_on'] else ' (off: prometheus_client missing)'} and "
        f"history: {counting:.2f} µs of worker CPU per decision (the two calls timed alone, "
        f"best of 5 x 20,000). {decisions:,} decisions drawn at random between the rows: "
        f"worker CPU median {cpu['Policy.hit']:.1f} µs with, "
        f"{cpu['without metrics and history']:.1f} µs without, shadow {cpu['shadow']:.1f} µs "
        "(a difference within the machine's noise). Round trips per decision: "
        + ", ".join(f"{name} {trips[name]['round_trips']:g}" for name in rows)
        + "; commands: "
        + ", ".join(f"{name} {trips[name]['commands']:g}" for name in rows)
    )
    return results


def counting_cpu_us(allowed: Any, shadowed: Any) -> float:
    """Return the CPU µs that counting one decision in the metrics and the history takes.

    What ``Policy.hit`` adds after the decision: ``count_decision`` and the
    history's ``record``, timed alone on real Decisions (one allowed, one
    shadow-denied in turn), best of 5 runs: a median of whole decisions
    cannot resolve a few µs on a busy machine.
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
    from tests.redis_server import RedisServer

    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--decisions", type=int, default=30_000, help="timed, in all (30,000)")
    args = parser.parse_args(argv)
    server = RedisServer()
    server.start()
    try:
        os.environ["BENCH_REDIS_URL"] = server.url
        os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
        import django

        django.setup()
        addresses = [f"10.0.{i // 256}.{i % 256}" for i in range(1000)]
        compare(server.client(), addresses, decisions=args.decisions)
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
