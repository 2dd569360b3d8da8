"""Overrides configured against none: round trips, commands, database queries, time.

    python -m bench.overrides [--decisions N]

Part of ``bench.decisions`` (``make bench``); alone, it starts its own
redis-server and needs none of the peers.

The named fixed window of the speed table (``fw-1000000``) against its twin
``fw-1000000-overrides`` (the same spec, another name), which has overrides
in force: a rate override (at 2,000,000/h, so still allowed) for every 4th
client of the bench's population, a block for each of 1,000 other
identities, and an exemption for each of 16 networks none of the clients is
in. So a quarter of its decisions are made at an override's rate and the
rest look for one and find none, the common case.

Overrides are loaded by hand into this process (``LOADER.load()``): the
loader thread is not run, so the counts below are the decisions' own. What
the thread costs is stated in docs/overrides.md: one ``GET`` a second per
process, and a database query on a change and every 30 s, all off the
decision path.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Sequence
from typing import Any

from bench.measure import Decide, alternating, commands_and_round_trips
from bench.runner import compare_main

PLAIN = "fw-1000000"
OVERRIDDEN = "fw-1000000-overrides"
COUNTED = 300


def configure(addresses: Sequence[str]) -> int:
    """Create the database and the overrides; load them. Return how many there are."""
    from django.core.management import call_command
    from django.utils import timezone

    from django_rl.models import Override
    from django_rl.overrides import LOADER

    LOADER.autostart = False
    call_command("migrate", verbosity=0)
    later = timezone.now() + datetime.timedelta(days=1)

    def override(identity: str, action: str, rate: str = "") -> Override:
        return Override(
            policy=OVERRIDDEN,
            identity=identity,
            action=action,
            rate=rate,
            expires_at=later,
            reason="bench",
        )

    made = [override(f"ip:{a}", "rate", "2000000/h") for a in addresses[::4]]
    made += [override(f"user:{i}", "block") for i in range(1000)]
    made += [override(f"ip:198.18.{i}.0/24", "exempt") for i in range(16)]
    Override.objects.bulk_create(made)
    assert LOADER.load()
    return len(made)


def compare(admin: Any, addresses: Sequence[str], *, decisions: int) -> dict[str, Any]:
    """Return round trips, commands and queries per decision of both, and their time ratio."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from django_rl import get_policy

    configured = configure(addresses)
    identities = [f"ip:{address}" for address in addresses]
    rows: dict[str, Decide] = {}
    for name in (PLAIN, OVERRIDDEN):
        hit = get_policy(name).hit
        rows[name] = lambda i, hit=hit: hit(identities[i]).allowed
    counts = {}
    for name, decide in rows.items():
        with CaptureQueriesContext(connection) as queries:
            commands, round_trips, _ = commands_and_round_trips(decide, COUNTED, admin)
        counts[name] = {
            "commands": commands,
            "round_trips": round_trips,
            "queries": len(queries.captured_queries) / COUNTED,
        }
    samples = alternating(rows, decisions=decisions, population=len(addresses))
    alone = {name: samples[name].summary() for name in rows}
    results = {
        "overrides": configured,
        "plain": PLAIN,
        "overridden": OVERRIDDEN,
        "decisions": decisions,
        "ratio": alone[OVERRIDDEN]["median_us"] / alone[PLAIN]["median_us"],
        "cpu_ratio": alone[OVERRIDDEN]["cpu_median_us"] / alone[PLAIN]["cpu_median_us"],
        "median_us": {name: alone[name]["median_us"] for name in rows},
        "cpu_median_us": {name: alone[name]["cpu_median_us"] for name in rows},
        **{f"{key}": {name: counts[name][key] for name in rows} for key in counts[PLAIN]},
    }
    print(
        f"\nPolicy.hit with {configured:,} overrides in force against none, {decisions:,} "
        f"decisions drawn at random between the two: {results['ratio']:.3f}x "
        f"({alone[OVERRIDDEN]['median_us']:.1f} vs {alone[PLAIN]['median_us']:.1f} µs median), "
        f"CPU {results['cpu_ratio']:.3f}x; round trips {counts[OVERRIDDEN]['round_trips']:g} "
        f"vs {counts[PLAIN]['round_trips']:g}, commands {counts[OVERRIDDEN]['commands']:g} vs "
        f"{counts[PLAIN]['commands']:g}, database queries {counts[OVERRIDDEN]['queries']:g} vs "
        f"{counts[PLAIN]['queries']:g} per decision"
    )
    return results


def main(argv: list[str] | None = None) -> int:
    return compare_main(__doc__ or "", compare, argv)


if __name__ == "__main__":
    sys.exit(main())
