"""Cost of one rate-limit decision: django_rl against its floors and its peers.

    python -m bench.decisions [--rounds N] [--batch N] [--quick] [--json PATH] [--strict]

Starts its own redis-server on a free port (and stops it), then measures:

1. speed: µs per allowed decision (median of interleaved rounds, p25-p75),
   ratio to PING, to one INCRBY on the same kept connection (the yardstick
   throttled-py publishes: its limiters at 1.06-1.37x of INCRBY) and to the
   row's raw floor, commands and round trips; and
   an inline policy (``@ratelimit(rate=...)``) against the named one (ratio);
   and the outage fallback: a local decision beside a Redis-backed one, and a
   Redis-backed one with ``fallback_rate`` set (``bench/fallback.py``);
   and a policy with overrides in force against one without (bench/overrides.py);
   and each algorithm with block_for + escalate against without (bench/blocks.py);
2. memory per identity after 100 hits at a limit of 100 (``MEMORY USAGE``);
3. a flood from one denied client, with and without the local deny cache;
4. over-admission: 8 threads (800 attempts) and 4 processes (400 attempts)
   at a limit of 100;

checks the targets of docs/performance.md, prints tables and writes JSON
(default ``bench/results/decisions.json``); ``--strict`` exits 1 if a target
is missed. See bench/measure.py for how.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from importlib import metadata
from typing import Any

from bench import blocks, observability, overrides
from bench.fallback import fallback
from bench.flood import flood, flood_rows, sustained, sustained_row
from bench.limiters import ALGORITHMS, INCRBY_ROW, INLINE_ROW, LIMITERS, NAMED_ROW, Limiter
from bench.measure import (
    alternating,
    commands_and_round_trips,
    interleaved,
    memory_per_identity,
    ratio,
)
from bench.overadmission import over_admission
from bench.report import check_targets, print_table
from bench.runner import bench_main, setup_django
from tests.support.redis_server import RedisServer

PACKAGES = (
    "Django",
    "redis",
    "hiredis",
    "django-redis",
    "djangorestframework",
    "django-ratelimit",
    "limits",
    "django-smart-ratelimit",
)
#: Clients the speed rows spread their hits over.
POPULATION = 1000
ADDRESSES = [f"10.{i // 65536}.{i // 256 % 256}.{i % 256}" for i in range(POPULATION)]
COUNTED_DECISIONS = 300


def main(argv: list[str] | None = None) -> int:
    return bench_main(__doc__ or "", "decisions.json", run, argv)


def run(server: RedisServer, *, rounds: int, batch: int) -> dict[str, Any]:
    admin = setup_django(server)
    started = time.monotonic()
    results: dict[str, Any] = {"environment": environment(admin, rounds, batch)}
    print_environment(results["environment"])

    results["speed"], results["inline_vs_named"] = speed(admin, rounds=rounds, batch=batch)
    results["fallback"] = fallback(rounds=rounds, batch=batch)
    results["overrides"] = overrides.compare(admin, ADDRESSES, decisions=2 * rounds * batch)
    results["blocks"] = blocks.compare(admin, ADDRESSES, decisions=2 * rounds * batch)
    results["observability"] = observability.compare(admin, ADDRESSES, decisions=2 * rounds * batch)
    results["memory"] = memory(admin)
    wait_for_a_fresh_hour(admin)
    results["flood"] = flood(admin, rounds=rounds, batch=batch * 5)
    print_table(
        "Flood from one denied client (limit 100/h, used up): µs per denied decision",
        ["row", "µs median", "p25-p75", "x PING", "commands", "round trips"],
        flood_rows(results["flood"]),
    )
    results["flood"]["sustained"] = sustained(admin)
    print_table(
        "Sustained flood (sliding_log, deny cache): what resets' propagation costs",
        ["seconds", "denied hits", "a second", "round trips", "per denied hit", "token reads/s"],
        [sustained_row(results["flood"]["sustained"])],
    )
    limiters = [limiter for limiter in LIMITERS if limiter.limits_requests]
    results["over_admission"] = over_admission(limiters, server.url)
    print_table(
        "Over-admission at a limit of 100 (allowed; exact is 100)",
        ["row", "8 threads, 800 attempts", "4 processes, 400 attempts"],
        [
            [name, str(counts["threads"]), str(counts["processes"])]
            for name, counts in results["over_admission"].items()
        ],
    )
    results["targets"] = check_targets(results)
    results["seconds"] = round(time.monotonic() - started, 1)
    print(f"\nbench.decisions took {results['seconds']} s")
    return results


def environment(admin: Any, rounds: int, batch: int) -> dict[str, Any]:
    info = admin.info("server")
    return {
        "python": platform.python_version(),
        "redis_server": info["redis_version"],
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "packages": {name: _version(name) for name in PACKAGES},
        "rounds": rounds,
        "batch": batch,
        "population": POPULATION,
    }


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def print_environment(env: dict[str, Any]) -> None:
    packages = ", ".join(f"{name} {version}" for name, version in env["packages"].items())
    load = ", ".join(f"{x:.2f}" for x in env["load_average"])
    print(f"Python {env['python']}, redis-server {env['redis_server']}, {env['cpus']} CPUs")
    print(f"load average before: {load}")
    print(packages)
    print(f"{env['rounds']} interleaved rounds of {env['batch']} decisions per row")


def speed(admin: Any, *, rounds: int, batch: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return the speed of every row, and the inline policy's cost against the named one's.

    The inline and the named ``@ratelimit`` rows run the same fixed window at
    the same rate; timed again alone, decision by decision (each call's row
    drawn at random), the ratio of their medians is the cost of an inline
    policy per decision.
    """
    addresses = ADDRESSES
    rows = {limiter.name: limiter.build(1_000_000, addresses) for limiter in LIMITERS}
    samples = interleaved(rows, rounds=rounds, batch=batch, population=POPULATION)
    results: dict[str, Any] = {}
    for limiter in LIMITERS:
        commands, round_trips, by_name = commands_and_round_trips(
            rows[limiter.name], COUNTED_DECISIONS, admin
        )
        results[limiter.name] = {
            "group": limiter.group,
            **samples[limiter.name].summary(),
            "ping_ratio": ratio(samples, limiter.name, "PING"),
            "incrby_ratio": ratio(samples, limiter.name, INCRBY_ROW),
            "floor": limiter.floor,
            "floor_ratio": ratio(samples, limiter.name, limiter.floor) if limiter.floor else None,
            "commands": commands,
            "round_trips": round_trips,
            "commands_by_name": by_name,
        }
    print_table(
        "Speed: µs per allowed decision (limit 1,000,000/h, 1,000 clients)",
        [
            "row",
            "µs median",
            "p25-p75",
            "CPU µs",
            "x PING",
            "x INCRBY",
            "x raw floor",
            "commands",
            "round trips",
        ],
        [_speed_row(name, row) for name, row in results.items()],
    )
    print_incrby_yardstick(results)
    # The two rows alone, decision by decision, each call's row drawn at
    # random: where a row's batch sits among the others of a round (after a
    # peer that leaves the caches cold, right after a collection) moves a
    # ratio of batches by a few percent on a busy machine.
    pair = alternating(
        {name: rows[name] for name in (NAMED_ROW, INLINE_ROW)},
        decisions=2 * rounds * batch,
        population=POPULATION,
    )
    alone = {name: pair[name].summary() for name in pair}
    inline = {
        "inline": INLINE_ROW,
        "named": NAMED_ROW,
        "ratio": alone[INLINE_ROW]["median_us"] / alone[NAMED_ROW]["median_us"],
        "cpu_ratio": alone[INLINE_ROW]["cpu_median_us"] / alone[NAMED_ROW]["cpu_median_us"],
        "ratio_in_the_table": ratio(samples, INLINE_ROW, NAMED_ROW),
        "inline_alone_median_us": alone[INLINE_ROW]["median_us"],
        "named_alone_median_us": alone[NAMED_ROW]["median_us"],
        "inline_alone_cpu_us": alone[INLINE_ROW]["cpu_median_us"],
        "named_alone_cpu_us": alone[NAMED_ROW]["cpu_median_us"],
        "decisions_alone": 2 * rounds * batch,
        "inline_median_us": results[INLINE_ROW]["median_us"],
        "named_median_us": results[NAMED_ROW]["median_us"],
        "inline_round_trips": results[INLINE_ROW]["round_trips"],
        "named_round_trips": results[NAMED_ROW]["round_trips"],
    }
    print(
        f"\nInline policy vs named one (@ratelimit), {inline['decisions_alone']:,} decisions "
        f"drawn at random between the two: {inline['ratio']:.3f}x "
        f"({inline['inline_alone_median_us']:.1f} vs {inline['named_alone_median_us']:.1f} µs "
        f"median), CPU {inline['cpu_ratio']:.3f}x ({inline['inline_alone_cpu_us']:.1f} vs "
        f"{inline['named_alone_cpu_us']:.1f} µs); in the table above "
        f"{inline['ratio_in_the_table']:.3f}x; "
        f"{inline['inline_round_trips']:g} vs {inline['named_round_trips']:g} round trips"
    )
    return results, inline


def _speed_row(name: str, row: dict[str, Any]) -> list[str]:
    return [
        name,
        f"{row['median_us']:.1f}",
        f"{row['p25_us']:.1f}-{row['p75_us']:.1f}",
        f"{row['cpu_median_us']:.1f}",
        f"{row['ping_ratio']:.2f}",
        f"{row['incrby_ratio']:.2f}",
        f"{row['floor_ratio']:.3f}" if row["floor_ratio"] else "",
        f"{row['commands']:g}",
        f"{row['round_trips']:g}",
    ]


def print_incrby_yardstick(results: dict[str, Any]) -> None:
    """Print each algorithm's ``Policy.hit`` as a multiple of one INCRBY (throttled-py's way)."""
    parts = [
        f"{algorithm} {results[f'{algorithm}: Policy.hit']['incrby_ratio']:.2f}x"
        for algorithm in ALGORITHMS
    ]
    incrby_us = results[INCRBY_ROW]["median_us"]
    print(
        f"\nPolicy.hit as a multiple of one INCRBY on the same kept connection "
        f"({incrby_us:.1f} µs; median of per-round ratios): {', '.join(parts)} "
        f"(throttled-py publishes 1.06-1.37x for its limiters, measured its own way)"
    )


def memory(admin: Any) -> dict[str, Any]:
    results = {}
    for limiter in LIMITERS:
        if limiter.limits_requests and _first_front_door(limiter):
            decide = limiter.build(100, ["198.51.100.1"])
            results[limiter.name] = memory_per_identity(decide, 100, admin)
    print_table(
        "Memory per identity after 100 hits at a limit of 100 (MEMORY USAGE)",
        ["row", "bytes", "keys", "type/encoding", "allowed"],
        [
            [name, str(r["bytes"]), str(r["keys"]), ", ".join(r["encodings"]), str(r["allowed"])]
            for name, r in results.items()
        ],
    )
    return results


def _first_front_door(limiter: Limiter) -> bool:
    """The decorator and the throttle keep the same state as Policy.hit: measure it once."""
    return limiter.group != "django_rl" or limiter.name.endswith("Policy.hit")


def wait_for_a_fresh_hour(admin: Any, margin_s: float = 90.0) -> None:
    """Fixed windows of an hour: do not let the flood or a race straddle an edge."""
    seconds, _ = admin.time()
    left = 3600 - int(seconds) % 3600
    if left < margin_s:
        print(f"(waiting {left} s for the next hour's window)")
        time.sleep(left + 1)


if __name__ == "__main__":
    sys.exit(main())
