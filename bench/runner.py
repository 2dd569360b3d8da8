"""What every bench script's ``main`` does: options, its own redis-server, Django, the JSON.

A script gives :func:`bench_main` its docstring, its JSON file's name and
``run(server, rounds=, batch=) -> results``; ``run`` calls
:func:`setup_django` first. The server is stopped whatever happens.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from bench.report import bench_parser, finish
from tests.support.redis_server import RedisServer

Run = Callable[..., dict[str, Any]]


def setup_django(server: RedisServer) -> Any:
    """Point the bench's settings at ``server``, set Django up; return an admin client."""
    os.environ["BENCH_REDIS_URL"] = server.url
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    django_setup()
    return server.client()


def django_setup() -> None:
    """Set Django up with the bench's settings, its database (in memory) migrated.

    Migrated so that the overrides loader finds its table: without it, every
    process the bench starts would log that overrides cannot be loaded.
    """
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


#: The clients of a comparison run alone (``bench.overrides``, ``bench.observability``).
ADDRESSES = [f"10.0.{i // 256}.{i % 256}" for i in range(1000)]


def compare_main(doc: str, compare: Callable[..., Any], argv: list[str] | None = None) -> int:
    """Run ``compare(admin, ADDRESSES, decisions=N)`` on a server of its own (``--decisions``)."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--decisions", type=int, default=10_000, help="timed, in all (10,000)")
    args = parser.parse_args(argv)
    server = RedisServer()
    server.start()
    try:
        compare(setup_django(server), ADDRESSES, decisions=args.decisions)
    finally:
        server.close()
    return 0


def bench_main(doc: str, results_name: str, run: Run, argv: list[str] | None = None) -> int:
    """Parse ``--rounds``, ``--batch``, ``--quick``, ``--json``, ``--strict``; run; write JSON.

    Returns the exit status: 1 with ``--strict`` when a target of
    ``results["targets"]`` (if any) is missed.
    """
    parser = bench_parser(doc, results_name, "5 rounds of 20")
    parser.add_argument("--rounds", type=int, default=100, help="interleaved rounds (default 100)")
    parser.add_argument("--batch", type=int, default=50, help="decisions per row per round (50)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.batch = 5, 20
    server = RedisServer()
    server.start()
    try:
        results = run(server, rounds=args.rounds, batch=args.batch)
    finally:
        server.close()
    missed = [t["target"] for t in results.get("targets", []) if not t["met"]]
    return finish(args.json, results, missed, args.strict)
