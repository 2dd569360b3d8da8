"""Tables (Markdown, to paste into docs/performance.md) and the targets' verdicts."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.limiters import ALGORITHMS

FRONT_DOORS = ("Policy.hit", "@ratelimit", "PolicyThrottle")
SLOW_PEERS = (
    "DRF AnonRateThrottle (django-redis)",
    "django-ratelimit is_ratelimited (django-redis)",
)
MEMORY_TARGETS = {
    "fixed_window": 104,
    "token_bucket": 120,
    "sliding_log": 2232,
    "gcra": 104,
    "sliding_window": 400,
}


def bench_parser(doc: str, results: str, quick: str) -> argparse.ArgumentParser:
    """Return an argument parser with the options every bench script takes."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{quick}: a smoke test")
    parser.add_argument("--json", type=Path, default=Path("bench/results") / results)
    parser.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    return parser


def finish(path: Path, results: dict[str, Any], missed: list[str], strict: bool) -> int:
    """Write the JSON, say what was missed; return the exit status."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nJSON: {path}")
    if missed:
        print(f"Targets missed (see docs/performance.md for the causes): {'; '.join(missed)}")
    return 1 if missed and strict else 0


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    print(f"\n{title}\n")
    print(line(header))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print(line(row))


def check_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Return every target of docs/performance.md with its figure and whether it is met."""
    speed = results["speed"]
    targets = []

    def target(name: str, figure: str, met: bool) -> None:
        targets.append({"target": name, "figure": figure, "met": met})

    for algorithm in ALGORITHMS:
        row = speed[f"{algorithm}: Policy.hit"]
        target(
            f"{algorithm}: Policy.hit <= 1.08x its raw call",
            f"{row['floor_ratio']:.3f}x",
            row["floor_ratio"] <= 1.08,
        )
    # Speeds are compared by their ratios to PING (each a median of per-round
    # ratios): steadier on a busy machine than medians of µs.
    for algorithm in ALGORITHMS:
        slowest = max(speed[f"{algorithm}: {door}"]["ping_ratio"] for door in FRONT_DOORS)
        for peer in SLOW_PEERS:
            times = speed[peer]["ping_ratio"] / slowest
            target(
                f"{algorithm} (slowest front door) >= 2x faster than {peer.split(' (')[0]}",
                f"{times:.2f}x",
                times >= 2,
            )
    ours = speed["sliding_log: Policy.hit"]["ping_ratio"]
    theirs = speed["limits moving window"]["ping_ratio"]
    target(
        "sliding_log at least as fast as limits' moving window",
        f"{ours:.2f} vs {theirs:.2f} PING",
        ours <= theirs,
    )
    inline = results["inline_vs_named"]
    # Round trips per decision, over 300: a fixed window adds a TIME every 30 s
    # per process, in whichever row's decision meets it.
    same_trips = abs(inline["inline_round_trips"] - inline["named_round_trips"]) < 0.05
    target(
        "an inline policy costs what a named one does (@ratelimit, <= 1.05x, same round trips)",
        f"{inline['ratio']:.3f}x, {inline['inline_round_trips']:g} vs "
        f"{inline['named_round_trips']:g} round trips",
        inline["ratio"] <= 1.05 and same_trips,
    )
    guarded = results["fallback"]["fallback_set_vs_not"]
    target(
        "fallback_rate set: a Redis-backed Policy.hit costs what it does without (<= 1.05x)",
        f"{guarded:.3f}x",
        guarded <= 1.05,
    )
    seen = results["observability"]
    target(
        "metrics and history cost at most 5 µs of CPU per decision (Policy.hit_request)",
        f"{seen['cpu_cost_us']:+.1f} µs (medians), {seen['counting_cpu_us']:.2f} µs (the calls)",
        seen["cpu_cost_us"] <= 5 and seen["counting_cpu_us"] <= 5,
    )
    shadow, plain = seen["shadow"]["shadow"], seen["shadow"]["plain"]
    target(
        "shadow mode adds no round trip and no command",
        f"round trips {shadow['round_trips']:g} vs {plain['round_trips']:g}, "
        f"commands {shadow['commands']:g} vs {plain['commands']:g}",
        shadow["round_trips"] <= plain["round_trips"] and shadow["commands"] <= plain["commands"],
    )
    overridden = results["overrides"]
    trips = overridden["round_trips"]
    same = abs(trips[overridden["overridden"]] - trips[overridden["plain"]]) < 0.05
    no_queries = not any(overridden["queries"].values())
    target(
        "overrides in force add no round trip and no database query (Policy.hit)",
        f"{trips[overridden['overridden']]:g} vs {trips[overridden['plain']]:g} round trips, "
        f"{overridden['ratio']:.3f}x time, "
        f"{overridden['queries'][overridden['overridden']]:g} queries",
        same and no_queries,
    )
    for algorithm, most in MEMORY_TARGETS.items():
        used = results["memory"][f"{algorithm}: Policy.hit"]["bytes"]
        target(f"{algorithm}: memory per identity <= {most} B", f"{used} B", used <= most)
    exact = all(
        counts == {"threads": 100, "processes": 100}
        for name, counts in results["over_admission"].items()
        if name.split(":")[0] in ALGORITHMS
    )
    target("zero over-admission, every django_rl row", "exactly 100" if exact else "over", exact)
    flood = results["flood"]["rows"]
    for algorithm in ALGORITHMS:
        row = flood[f"{algorithm}: denied, deny cache"]
        target(
            f"{algorithm} flood: Redis commands per denied decision <= 0.01",
            f"{row['commands']:.5f}",
            row["commands"] <= 0.01,
        )
        target(
            f"{algorithm} flood: a local denial <= 5% of a PING",
            f"{row['ping_ratio'] * 100:.1f}%",
            row["ping_ratio"] <= 0.05,
        )
    held = results["flood"].get("sustained")
    if held is not None:
        target(
            "sustained flood: Redis round trips per denied hit <= 0.01",
            f"{held['round_trips_per_denied']:.6f}",
            held["round_trips_per_denied"] <= 0.01,
        )
        target(
            "sustained flood: reset propagation <= 1 command a second per process",
            f"{held['token_reads_per_second']:.2f}/s",
            held["token_reads_per_second"] <= 1,
        )
    print_table(
        "Targets",
        ["target", "figure", "met"],
        [[t["target"], t["figure"], "yes" if t["met"] else "NO"] for t in targets],
    )
    return targets
