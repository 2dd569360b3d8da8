"""The outage fallback's cost: a local decision beside a Redis-backed one, in the same run.

Four rows of one fixed-window policy at 1,000,000/h over the same 1,000
clients, timed decision by decision, each call's row drawn at random
(``measure.alternating``), so the machine's drift falls on all alike; the
first two alone, then the first with the last two:

* ``Redis, no fallback_rate``: ``Policy.hit``, Redis answering;
* ``Redis, fallback_rate set``: the same with ``fallback_rate``: what a
  healthy Redis path costs once a fallback is configured (a ratio of 1);
* ``local count alone``: the fallback's own decision (``LocalFallback.hit``);
* ``Policy.hit, Redis refusing``: a decision during an outage whose
  connections are refused at once (a down host answers RST): the failed
  attempt, then the local count. A hung Redis adds its socket timeout.

    python -m bench.fallback [--rounds N] [--batch N] [--quick] [--json PATH]

``bench.decisions`` runs it too (``make bench``).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from bench.measure import alternating
from bench.report import print_table
from bench.runner import bench_main, setup_django
from tests.support.redis_server import RedisServer

POPULATION = 1000
LIMIT = 1_000_000
ROWS = (
    "Redis, no fallback_rate",
    "Redis, fallback_rate set",
    "local count alone",
    "Policy.hit, Redis refusing",
)
#: The alias of bench/settings.py whose LOCATION no server listens on.
DEAD_ALIAS = "dead"


def fallback(rounds: int, batch: int) -> dict[str, Any]:
    """Return µs per decision of each row, and the ratios the docs quote."""
    from bench.limiters import policy_name
    from django_rl import get_policy
    from django_rl.conf import get_settings
    from django_rl.policies.registry import build_policy

    plain = get_policy(policy_name("fixed_window", LIMIT))
    spec = {"algorithm": "fixed_window", "rate": f"{LIMIT}/h", "key": "ip"}
    guarded = build_policy("fwf", {**spec, "fallback_rate": f"{LIMIT}/h"}, get_settings(), where="")
    dead_settings = dataclasses.replace(get_settings(), connection=DEAD_ALIAS)
    outage = build_policy("fwo", {**spec, "fallback_rate": f"{LIMIT}/h"}, dead_settings, where="")
    assert outage.fallback is not None
    local = outage.fallback
    identities = [f"ip:10.9.{i // 256}.{i % 256}" for i in range(POPULATION)]
    decide = {
        ROWS[0]: lambda i: plain.hit(identities[i]).allowed,
        ROWS[1]: lambda i: guarded.hit(identities[i]).allowed,
        ROWS[2]: lambda i: local.hit(identities[i]).allowed,
        ROWS[3]: lambda i: outage.hit(identities[i]).allowed,
    }
    # The outage's one warning would land in the tables.
    logging.getLogger("django_rl").setLevel(logging.ERROR)
    decisions = 2 * rounds * batch
    # The healthy pair alone first: a local decision (the other rows) starts
    # an episode that the next Redis-backed decision of a fallback policy
    # ends, which a process whose Redis answers never does.
    healthy = alternating(
        {name: decide[name] for name in ROWS[:2]}, decisions=decisions, population=POPULATION
    )
    local.store.clear()
    trio = (ROWS[0], ROWS[2], ROWS[3])
    outage_samples = alternating(
        {name: decide[name] for name in trio}, decisions=decisions * 3 // 2, population=POPULATION
    )
    assert outage.hit(identities[0]).fallback, "the outage row must decide locally"
    pair = {name: healthy[name].summary() for name in ROWS[:2]}
    summary = {name: outage_samples[name].summary() for name in trio}
    summary[ROWS[1]] = pair[ROWS[1]]
    redis_us = summary[ROWS[0]]["median_us"]
    results = {
        "healthy_pair": pair,
        "rows": {name: summary[name] for name in ROWS},
        "decisions": decisions,
        "fallback_set_vs_not": pair[ROWS[1]]["median_us"] / pair[ROWS[0]]["median_us"],
        "fallback_set_vs_not_cpu": pair[ROWS[1]]["cpu_median_us"] / pair[ROWS[0]]["cpu_median_us"],
        "local_vs_redis": summary[ROWS[2]]["median_us"] / redis_us,
        "outage_vs_redis": summary[ROWS[3]]["median_us"] / redis_us,
    }
    print_table(
        f"Healthy Redis, with and without fallback_rate: µs per decision, {decisions:,} "
        "decisions drawn at random between the two (fixed_window 1,000,000/h)",
        ["row", "µs median", "p25-p75", "CPU µs", "ratio"],
        [_row(name, row, pair[ROWS[0]]["median_us"]) for name, row in pair.items()],
    )
    print_table(
        f"Outage fallback: µs per decision, {decisions * 3 // 2:,} decisions drawn at random "
        "among the three",
        ["row", "µs median", "p25-p75", "CPU µs", "x Redis, no fallback_rate"],
        [_row(name, summary[name], redis_us) for name in trio],
    )
    return results


def _row(name: str, row: dict[str, float], base_us: float) -> list[str]:
    return [
        name,
        f"{row['median_us']:.1f}",
        f"{row['p25_us']:.1f}-{row['p75_us']:.1f}",
        f"{row['cpu_median_us']:.1f}",
        f"{row['median_us'] / base_us:.3f}",
    ]


def main(argv: list[str] | None = None) -> int:
    def run(server: RedisServer, *, rounds: int, batch: int) -> dict[str, Any]:
        setup_django(server)
        return fallback(rounds, batch)

    return bench_main(__doc__ or "", "fallback.json", run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
