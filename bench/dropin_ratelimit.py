"""The django-ratelimit drop-in against django-ratelimit itself, in one run.

    python -m bench.dropin_ratelimit [--rounds N] [--batch N] [--quick] [--json PATH] [--strict]

Starts its own redis-server (and stops it); both sides use it through the
bench's django-redis cache (``bench/settings.py``), with the same socket
timeouts. Rows, each the same call a project makes:

* ``is_ratelimited(increment=True)`` of the original and of
  ``django_rl.contrib.ratelimit``, key ``ip``, spread over 1,000 clients at a
  limit of 1,000,000/h (every decision allowed): µs per decision (median of
  interleaved rounds), the per-round ratio, commands and round trips;
* the same through ``@ratelimit`` on a view;
* over-admission: 8 threads x 100 attempts on one client at a limit of 100.

Target: the drop-in at least 2x faster per decision (the ratio of the
``is_ratelimited`` rows at most 0.5), and never over the limit.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from bench.limiters import Limiter
from bench.measure import commands_and_round_trips, interleaved, ratio
from bench.overadmission import LIMIT, THREAD_ATTEMPTS, THREADS, race_threads
from bench.peers import Decide, requests_for
from bench.report import print_table
from bench.runner import bench_main, setup_django
from tests.support.redis_server import RedisServer

POPULATION = 1000
ADDRESSES = [f"10.{i // 65536}.{i // 256 % 256}.{i % 256}" for i in range(POPULATION)]
COUNTED_DECISIONS = 300
#: The target: the drop-in's µs per decision over the original's, at most.
TARGET_RATIO = 0.5


def core_row(module: str) -> Any:
    """Return a ``Limiter.build`` of ``<module>.core.is_ratelimited(increment=True)``."""

    def build(limit: int, addresses: Sequence[str]) -> Decide:
        import importlib

        is_ratelimited = importlib.import_module(f"{module}.core").is_ratelimited
        requests = requests_for(addresses)
        rate = f"{limit}/h"
        return lambda i: (
            not is_ratelimited(requests[i], group="b", key="ip", rate=rate, increment=True)
        )

    return build


def decorator_row(module: str) -> Any:
    """Return a ``Limiter.build`` of ``@<module>.decorators.ratelimit(block=False)`` on a view."""

    def build(limit: int, addresses: Sequence[str]) -> Decide:
        import importlib

        ratelimit = importlib.import_module(f"{module}.decorators").ratelimit
        requests = requests_for(addresses)

        @ratelimit(group="v", key="ip", rate=f"{limit}/h", block=False)
        def view(request: Any) -> bool:
            return not request.limited

        return lambda i: view(requests[i])

    return build


ORIGINAL, DROP_IN = "django_ratelimit", "django_rl.contrib.ratelimit"
ROWS = {
    "django-ratelimit is_ratelimited": core_row(ORIGINAL),
    "drop-in is_ratelimited": core_row(DROP_IN),
    "django-ratelimit @ratelimit": decorator_row(ORIGINAL),
    "drop-in @ratelimit": decorator_row(DROP_IN),
}
PAIRS = (
    ("drop-in is_ratelimited", "django-ratelimit is_ratelimited"),
    ("drop-in @ratelimit", "django-ratelimit @ratelimit"),
)


def main(argv: list[str] | None = None) -> int:
    return bench_main(__doc__ or "", "dropin_ratelimit.json", run, argv)


def run(server: RedisServer, *, rounds: int, batch: int) -> dict[str, Any]:
    admin = setup_django(server)
    started = time.monotonic()
    print(f"{rounds} interleaved rounds of {batch} decisions per row; load {os.getloadavg()}")
    deciders = {name: build(1_000_000, ADDRESSES) for name, build in ROWS.items()}
    samples = interleaved(deciders, rounds=rounds, batch=batch, population=POPULATION)
    speed: dict[str, Any] = {}
    for name, decide in deciders.items():
        commands, round_trips, _ = commands_and_round_trips(decide, COUNTED_DECISIONS, admin)
        speed[name] = {**samples[name].summary(), "commands": commands, "round_trips": round_trips}
    ratios = {row: ratio(samples, row, base) for row, base in PAIRS}
    print_table(
        "django-ratelimit drop-in vs django-ratelimit: µs per allowed decision "
        "(limit 1,000,000/h, 1,000 clients, django-redis cache)",
        ["row", "µs median", "p25-p75", "CPU µs", "x original", "commands", "round trips"],
        [
            [
                name,
                f"{row['median_us']:.1f}",
                f"{row['p25_us']:.1f}-{row['p75_us']:.1f}",
                f"{row['cpu_median_us']:.1f}",
                f"{ratios[name]:.2f}" if name in ratios else "",
                f"{row['commands']:.2f}",
                f"{row['round_trips']:.2f}",
            ]
            for name, row in speed.items()
        ],
    )
    over = {
        name: race_threads(Limiter(name, "peer", ROWS[name]), 200 + index)
        for index, name in enumerate(ROWS)
    }
    print_table(
        f"Over-admission at a limit of {LIMIT} (allowed; exact is {LIMIT})",
        ["row", f"{THREADS} threads, {THREADS * THREAD_ATTEMPTS} attempts"],
        [[name, str(allowed)] for name, allowed in over.items()],
    )
    core_ratio = ratios["drop-in is_ratelimited"]
    targets = [
        {
            "target": f"drop-in at least 2x faster per decision (ratio <= {TARGET_RATIO})",
            "figure": f"{core_ratio:.2f}",
            "met": core_ratio <= TARGET_RATIO,
        },
        {
            "target": "drop-in never over the limit (threads)",
            "figure": f"{over['drop-in is_ratelimited']}, {over['drop-in @ratelimit']}",
            "met": over["drop-in is_ratelimited"] == LIMIT and over["drop-in @ratelimit"] == LIMIT,
        },
    ]
    for target in targets:
        print(f"{'met ' if target['met'] else 'MISSED'} {target['target']}: {target['figure']}")
    return {
        "speed": speed,
        "ratios": ratios,
        "over_admission": over,
        "targets": targets,
        "seconds": round(time.monotonic() - started, 1),
    }


if __name__ == "__main__":
    raise SystemExit(main())
