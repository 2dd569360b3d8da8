"""The DRF drop-in against DRF's own throttle, in the same run.

    python -m bench.dropin_drf [--rounds N] [--batch N] [--quick] [--json PATH] [--strict]

Starts its own redis-server on a free port (and stops it). Both rows are
written the same way (``bench/peers.py``): a subclass of ``AnonRateThrottle``
with a rate, ``allow_request`` on a RequestFactory request; DRF's counts on
django-redis (``cache.get`` then ``cache.set``), the drop-in through
django_rl (one EVALSHA of the sliding log). Measures:

1. speed: µs per allowed decision (limit 1,000,000/h over 1,000 clients),
   interleaved rounds (``bench/measure.py``), and commands and round trips;
2. a denied client's flood: µs per denied decision (limit 100/h, used up);
3. over-admission at a limit of 100: 8 threads (800 attempts) and 4
   processes (400 attempts).

Targets: the drop-in at least 2x faster per allowed decision, and never
over the limit. Writes JSON (default ``bench/results/dropin_drf.json``).
"""

from __future__ import annotations

import time
from typing import Any

from bench.limiters import BY_NAME, DRF_DROPIN, DRF_ORIGINAL
from bench.measure import commands_and_round_trips, interleaved, ratio
from bench.overadmission import over_admission
from bench.report import print_table
from bench.runner import bench_main, setup_django
from tests.support.redis_server import RedisServer

POPULATION = 1000
ADDRESSES = [f"10.{i // 65536}.{i // 256 % 256}.{i % 256}" for i in range(POPULATION)]
ROWS = (DRF_ORIGINAL, DRF_DROPIN)
COUNTED_DECISIONS = 300
FLOOD_LIMIT = 100


def main(argv: list[str] | None = None) -> int:
    return bench_main(__doc__ or "", "dropin_drf.json", run, argv)


def run(server: RedisServer, *, rounds: int, batch: int) -> dict[str, Any]:
    admin = setup_django(server)
    started = time.monotonic()
    results: dict[str, Any] = {"rounds": rounds, "batch": batch, "population": POPULATION}
    results["allowed"] = speed(admin, 1_000_000, ADDRESSES, rounds=rounds, batch=batch)
    print_table(
        "DRF drop-in: µs per allowed decision (limit 1,000,000/h, 1,000 clients)",
        ["row", "µs median", "p25-p75", "CPU µs", "commands", "round trips"],
        _rows(results["allowed"]),
    )
    results["allowed_times_faster"] = results["allowed"][DRF_DROPIN]["times_faster"]
    print(f"drop-in: {results['allowed_times_faster']:.2f}x faster per allowed decision")
    results["denied"] = flood(admin, rounds=rounds, batch=batch)
    print_table(
        f"DRF drop-in: µs per denied decision (one client, limit {FLOOD_LIMIT}/h used up)",
        ["row", "µs median", "p25-p75", "CPU µs", "commands", "round trips"],
        _rows(results["denied"]),
    )
    results["over_admission"] = over_admission([BY_NAME[name] for name in ROWS], server.url)
    print_table(
        "Over-admission at a limit of 100 (allowed; exact is 100)",
        ["row", "8 threads, 800 attempts", "4 processes, 400 attempts"],
        [
            [name, str(counts["threads"]), str(counts["processes"])]
            for name, counts in results["over_admission"].items()
        ],
    )
    exact = results["over_admission"][DRF_DROPIN]
    results["targets"] = [
        {
            "target": "DRF drop-in >= 2x faster per allowed decision than DRF's throttle",
            "figure": f"{results['allowed_times_faster']:.2f}x",
            "met": results["allowed_times_faster"] >= 2,
        },
        {
            "target": "DRF drop-in never over the limit (100)",
            "figure": f"{exact['threads']} (threads), {exact['processes']} (processes)",
            "met": exact["threads"] <= 100 and exact["processes"] <= 100,
        },
    ]
    for target in results["targets"]:
        print(f"{'met' if target['met'] else 'MISSED'}: {target['target']}: {target['figure']}")
    results["seconds"] = round(time.monotonic() - started, 1)
    print(f"\nbench.dropin_drf took {results['seconds']} s")
    return results


def speed(
    admin: Any, limit: int, addresses: list[str], *, rounds: int, batch: int
) -> dict[str, Any]:
    """Return both rows' µs per decision, commands and round trips, and the drop-in's speed-up."""
    rows = {name: BY_NAME[name].build(limit, addresses) for name in ROWS}
    samples = interleaved(rows, rounds=rounds, batch=batch, population=len(addresses))
    results: dict[str, Any] = {}
    for name in ROWS:
        commands, round_trips, by_name = commands_and_round_trips(
            rows[name], COUNTED_DECISIONS, admin
        )
        results[name] = {
            **samples[name].summary(),
            "commands": commands,
            "round_trips": round_trips,
            "commands_by_name": by_name,
        }
    # The median of per-round ratios: both rows measured moments apart.
    results[DRF_DROPIN]["times_faster"] = ratio(samples, DRF_ORIGINAL, DRF_DROPIN)
    return results


def flood(admin: Any, *, rounds: int, batch: int) -> dict[str, Any]:
    """Return both rows' µs per denied decision: one client past a limit of 100/h."""
    address = ["192.0.2.200"]
    built = {name: BY_NAME[name].build(FLOOD_LIMIT, address) for name in ROWS}
    # Every decision is the one client's, whatever its index.
    rows = {name: (lambda i, decide=decide: decide(0)) for name, decide in built.items()}
    for decide in rows.values():
        allowed = [decide(0) for _ in range(FLOOD_LIMIT + 2)]
        assert sum(allowed) == FLOOD_LIMIT, allowed  # then denied
    samples = interleaved(rows, rounds=rounds, batch=batch, population=1)
    results: dict[str, Any] = {}
    for name in ROWS:
        commands, round_trips, _ = commands_and_round_trips(rows[name], COUNTED_DECISIONS, admin)
        counted = {"commands": commands, "round_trips": round_trips}
        results[name] = {**samples[name].summary(), **counted}
    results[DRF_DROPIN]["times_faster"] = ratio(samples, DRF_ORIGINAL, DRF_DROPIN)
    return results


def _rows(results: dict[str, Any]) -> list[list[str]]:
    return [
        [
            name,
            f"{row['median_us']:.1f}",
            f"{row['p25_us']:.1f}-{row['p75_us']:.1f}",
            f"{row['cpu_median_us']:.1f}",
            f"{row['commands']:.2f}",
            f"{row['round_trips']:.2f}",
        ]
        for name, row in results.items()
    ]


__all__ = ["main", "run"]

if __name__ == "__main__":
    raise SystemExit(main())
