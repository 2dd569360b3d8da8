"""Before and after: ``bench.decisions`` and ``bench.endtoend`` of two checkouts, run by run.

    python -m bench.compare --before DIR [--after DIR] [--runs 5] [--quick]
        [--benches decisions,endtoend] [--decisions-args "..."] [--endtoend-args "..."]
        [--json PATH]

Each run runs every bench once in each checkout, one after the other, the
order of the two checkouts swapped every run (so a machine that gets
busier or quieter over the runs weighs on both alike). Each checkout's
benches run from its own directory with it first on ``PYTHONPATH`` (its
``django_rl``, ``bench`` and ``tests``; checked before the first run), on
this interpreter: run it with ``.venv-bench/bin/python`` (``make bench``
makes it) so both have the peers and gunicorn; ``wrk`` must be installed.

Prints one table per bench: per row (``bench.decisions``: each speed row
and each flood row found in both, µs and CPU µs; ``bench.endtoend``: each
endpoint's limited, open and floor paths, requests per second, the ratio
to the open twin, worker CPU per request),
the median over the runs before and after, and after / before as the
median of the runs' own ratios (each run's two sides measured minutes
apart). Writes every run's results to ``--json``.

``--after`` is this checkout by default. The benches run shorter than
alone (``bench.decisions --rounds 10 --batch 50``, ``bench.endtoend
--seconds 1 --repeats 3``): 12 minutes for 5 runs on 2 cores under a load
average of 9-18 (``bench.decisions`` 23-47 s a run, most of it its fixed
parts: flood, over-admission, fallback); ``--quick`` (2 runs of the
``--quick`` benches) took 3.7 minutes. Read ``x PING`` first: in an A/A
run (two copies of one commit, load average 9-18) it stayed within 0.82-1.14
of itself where raw µs moved up to 1.6x.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.report import print_table

ROOT = Path(__file__).resolve().parent.parent
BENCHES = ("decisions", "endtoend")
ARGS = {"decisions": "--rounds 10 --batch 50", "endtoend": "--seconds 1 --repeats 3"}
QUICK_ARGS = {"decisions": "--quick", "endtoend": "--quick"}
SIDES = ("before", "after")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the checkout to compare with")
    parser.add_argument("--after", type=Path, default=ROOT, help="this checkout by default")
    parser.add_argument("--runs", type=int, default=5, help="runs of every bench per side (5)")
    parser.add_argument("--quick", action="store_true", help="2 runs of the --quick benches")
    parser.add_argument("--benches", default=",".join(BENCHES), help="decisions,endtoend")
    for bench in BENCHES:
        parser.add_argument(f"--{bench}-args", help=f"bench.{bench}'s options ({ARGS[bench]})")
    parser.add_argument("--json", type=Path, default=Path("bench/results/compare.json"))
    args = parser.parse_args(argv)
    benches = [name for name in args.benches.split(",") if name]
    unknown = set(benches) - set(BENCHES)
    if unknown:
        parser.error(f"unknown benches: {', '.join(sorted(unknown))}")
    defaults = QUICK_ARGS if args.quick else ARGS
    options = {
        bench: shlex.split(getattr(args, f"{bench}_args") or defaults[bench]) for bench in benches
    }
    runs = 2 if args.quick and args.runs == 5 else args.runs
    checkouts = {"before": args.before.resolve(), "after": args.after.resolve()}
    for side, checkout in checkouts.items():
        problem = checkout_problem(checkout, benches)
        if problem:
            print(f"--{side} {checkout}: {problem}", file=sys.stderr)
            return 2
    signal.signal(signal.SIGTERM, _interrupted)  # stop as Ctrl-C does: the bench cleans up
    started = time.monotonic()
    results = compare(checkouts, benches, options, runs)
    results["seconds"] = round(time.monotonic() - started, 1)
    report(results)
    print(f"\nbench.compare took {results['seconds']:.0f} s ({runs} runs)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(f"JSON: {args.json}")
    return 0


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def environment(checkout: Path) -> dict[str, str]:
    """Return the environment a checkout's benches run in: it first on ``PYTHONPATH``."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{checkout}{os.pathsep}{path}" if path else str(checkout)}


def checkout_problem(checkout: Path, benches: Sequence[str]) -> str | None:
    """Return what keeps ``checkout``'s benches from running here, or ``None``."""
    missing = [
        f"bench/{name}.py" for name in benches if not (checkout / "bench" / f"{name}.py").is_file()
    ]
    if missing:
        return f"no {', '.join(missing)}"
    found = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django_rl, bench; print(django_rl.__file__, bench.__file__)",
        ],
        cwd=checkout,
        env=environment(checkout),
        capture_output=True,
        text=True,
        check=False,
    )
    paths = found.stdout.split()
    if found.returncode or not all(Path(p).is_relative_to(checkout) for p in paths):
        return f"its modules do not import from it: {found.stdout or found.stderr}".strip()
    return None


def compare(
    checkouts: dict[str, Path], benches: Sequence[str], options: dict[str, list[str]], runs: int
) -> dict[str, Any]:
    """Run every bench of both checkouts ``runs`` times, the sides' order swapped every run."""
    results: dict[str, Any] = {
        "checkouts": {side: str(path) for side, path in checkouts.items()},
        "options": options,
        "runs": {bench: {side: [] for side in SIDES} for bench in benches},
    }
    with tempfile.TemporaryDirectory(prefix="django-rl-compare-") as scratch:
        for run in range(runs):
            sides = SIDES if run % 2 == 0 else SIDES[::-1]
            for bench in benches:
                for side in sides:
                    print(f"run {run + 1}/{runs}: bench.{bench}, {side} ...", flush=True)
                    found = run_bench(checkouts[side], bench, options[bench], Path(scratch))
                    results["runs"][bench][side].append(found)
    return results


def run_bench(checkout: Path, bench: str, options: list[str], scratch: Path) -> dict[str, Any]:
    """Run ``python -m bench.<bench>`` of ``checkout``; return its JSON (its output on failure)."""
    out = scratch / f"{bench}.json"
    command = [sys.executable, "-m", f"bench.{bench}", *options, "--json", str(out)]
    child = subprocess.Popen(
        command,
        cwd=checkout,
        env=environment(checkout),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = child.communicate()
    except BaseException:
        # Interrupted (Ctrl-C, or SIGTERM: main turns it into KeyboardInterrupt):
        # SIGINT lets the bench stop the redis-server and gunicorn it started;
        # SIGKILL only if it does not end within 30 s.
        child.send_signal(signal.SIGINT)
        try:
            child.wait(30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        raise
    done = subprocess.CompletedProcess(command, child.returncode, stdout, stderr)
    if done.returncode != 0 or not out.is_file():
        raise RuntimeError(
            f"{shlex.join(command)} in {checkout} exited {done.returncode}:\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    found: dict[str, Any] = json.loads(out.read_text())
    out.unlink()
    return found


#: Per bench: the rows of one run's results, each a dict of figures by name.
Rows = Callable[[dict[str, Any]], dict[str, dict[str, float]]]


def decision_rows(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    rows = {name: _decision_figures(row) for name, row in results["speed"].items()}
    for name, row in results.get("flood", {}).get("rows", {}).items():
        rows[f"flood: {name}"] = _decision_figures(row)
    return rows


def _decision_figures(row: dict[str, Any]) -> dict[str, float]:
    # x PING, a ratio within one run, is the steadiest on a busy machine.
    return {"µs": row["median_us"], "CPU µs": row["cpu_median_us"], "x PING": row["ping_ratio"]}


def endtoend_rows(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    rows = {}
    for name, pair in results["pairs"].items():
        rows[name] = {
            "req/s": pair["limited_rps"],
            "x open": pair["ratio"],
            "worker CPU µs/request": pair["limited_cpu_per_request"] * 1e6,
        }
        rows[f"{name}: open twin"] = {
            "req/s": pair["open_rps"],
            "worker CPU µs/request": pair["open_cpu_per_request"] * 1e6,
        }
        rows[f"{name}: floor twin (one PING)"] = {
            "req/s": pair["floor_rps"],
            "x open": pair["floor_ratio"],
            "worker CPU µs/request": pair["floor_cpu_per_request"] * 1e6,
        }
    return rows


ROWS: dict[str, Rows] = {"decisions": decision_rows, "endtoend": endtoend_rows}


#: Figures printed with 3 decimals (ratios); the others with 1.
RATIOS = {"x open", "x PING"}


def report(results: dict[str, Any]) -> None:
    """Print one before/after table per bench: medians over the runs, after / before."""
    for bench, sides in results["runs"].items():
        before = [ROWS[bench](r) for r in sides["before"]]
        after = [ROWS[bench](r) for r in sides["after"]]
        names = [name for name in before[0] if name in after[0]]
        figures = list(dict.fromkeys(f for name in names for f in before[0][name]))
        table = []
        for name in names:
            cells = [name]
            for figure in figures:
                cells += compared(
                    [r[name].get(figure) for r in before],
                    [r[name].get(figure) for r in after],
                    ".3f" if figure in RATIOS else ".1f",
                )
            table.append(cells)
        header = ["row"]
        for figure in figures:
            header += [f"{figure} before", "after", "after / before (runs' range)"]
        print_table(
            f"bench.{bench}: before / after, medians of {len(before)} runs "
            f"({shlex.join(results['options'][bench])})",
            header,
            table,
        )
    print()
    for bench, sides in results["runs"].items():
        for side in SIDES:
            loads = ", ".join(f"{load_average(r):.1f}" for r in sides[side])
            print(f"bench.{bench}, {side}: load average (1 min) at each run's start: {loads}")
    print(
        f"\nbefore: {results['checkouts']['before']}; after: {results['checkouts']['after']}. "
        "after / before: the median of each run's own ratio (< 1: fewer µs, fewer req/s)."
    )


def load_average(results: dict[str, Any]) -> float:
    """Return the 1-minute load average a bench's results say it started at."""
    found = results.get("environment") or results.get("setup") or {}
    return float(found.get("load_average", [float("nan")])[0])


def compared(old: list[float | None], new: list[float | None], form: str) -> list[str]:
    """Return the cells of one figure: median before, median after, after / before."""
    pairs = [(a, b) for a, b in zip(old, new, strict=True) if a is not None and b is not None]
    if not pairs:
        return ["", "", ""]
    ratios = [b / a for a, b in pairs if a]
    spread = f" ({min(ratios):.3f}-{max(ratios):.3f})" if len(ratios) > 1 else ""
    return [
        format(statistics.median(a for a, _ in pairs), form),
        format(statistics.median(b for _, b in pairs), form),
        f"{statistics.median(ratios):.3f}{spread}" if ratios else "",
    ]


if __name__ == "__main__":
    sys.exit(main())
