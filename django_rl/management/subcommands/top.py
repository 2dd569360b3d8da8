"""``ratelimit top POLICY``: the heaviest identities, from the same bounded SCAN as the admin."""

from __future__ import annotations

import heapq
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_rl.core.reprs import counted
from django_rl.inspection import (
    FIRST_PAGE,
    LIVE,
    MAX_PAGE_SIZE,
    SCAN_BUDGET,
    Query,
    Row,
    list_counters,
)
from django_rl.management.subcommands.output import table
from django_rl.policies.registry import policies_named

HELP = "List the identities that use most of POLICY's limit now, heaviest first."


def add_arguments(parser: CommandParser) -> None:
    parser.add_argument("policy", help="a policy name")
    parser.add_argument(
        "--count", type=int, default=10, metavar="N", help="how many to list (default 10)"
    )
    parser.add_argument(
        "--budget",
        type=int,
        default=5 * SCAN_BUDGET,
        metavar="KEYS",
        help=f"stop after SCAN has looked at about this many keys (default {5 * SCAN_BUDGET:,})",
    )


def handle(command: BaseCommand, options: dict[str, Any]) -> None:
    name = policies_named(options["policy"])[0].name  # an unknown name fails here
    count, budget = max(1, options["count"]), max(1, options["budget"])
    # One row per identity: SCAN may return a key twice. At most about
    # ``budget`` of them, since SCAN looks at no more keys than that.
    found: dict[str, Row] = {}
    cursor: str | None = FIRST_PAGE
    examined = keys_in_redis = 0
    unavailable: dict[str, None] = {}  # in order, once each
    while cursor is not None and examined < budget:
        query = Query(
            policy=name,
            cursor=cursor,
            page_size=MAX_PAGE_SIZE,
            budget=min(SCAN_BUDGET, budget - examined),
        )
        page = list_counters(query)
        found.update((row.identity, row) for row in page.rows if row.status == LIVE)
        unavailable.update(dict.fromkeys(page.unavailable))
        cursor, examined, keys_in_redis = (
            page.next_cursor,
            examined + page.examined,
            page.keys_in_redis,
        )
    rows = heapq.nsmallest(count, found.values(), key=lambda row: (-row.usage, row.identity))
    write = command.stdout.write
    if rows:
        header = ["identity", "used / limit", "remaining", "status", "resets in", "state"]
        lines = [
            [
                row.identity,
                f"{row.used_text} / {row.limit}",
                str(row.remaining),
                f"denied, retry in {row.retry_text}" if row.denied else "allowed",
                row.reset_text,
                row.detail,
            ]
            for row in rows
        ]
        write(table(header, lines, numeric=frozenset({1, 2})))
    else:
        write(f"No live counters under {name}.")
    if unavailable:
        write(f"Not listed: the keys on {', '.join(unavailable)}, which did not answer.")
    if cursor is None:
        where = "of the servers that answered" if unavailable else "in Redis"
        write(f"Walked every key {where} ({keys_in_redis:,}).")
    else:
        write(
            f"Stopped after SCAN looked at about {examined:,} of "
            f"{counted(keys_in_redis, 'key')}; "
            "pass --budget to look at more."
        )
