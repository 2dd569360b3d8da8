"""End to end on an async view: the example project under uvicorn, loaded by wrk on loopback.

    python -m bench.endtoend_asgi [--seconds N] [--repeats N] [--connections N]
                                  [--middleware example|lean] [--quick]

Requests per second of an ``async def`` view decorated with
``@ratelimit("burst")`` (token bucket; decided on the event loop, its
EVALSHA on the loop's auto-pipelined connection), against its twin without
the decorator (open) and a floor twin: the open view plus one PING awaited
on that same connection, what any limiter that asks Redis once per request
costs at the least, in the same run. Every request is allowed (the limit is
out of reach): this is what the limiter costs a request that gets through.

Setup: its own redis-server over loopback TCP; uvicorn (``--workers`` = the
cores, its usual setup for async apps; Django's ASGI handler); wrk with one
thread and ``--connections`` connections (50: requests in flight at once,
as an async server sees them), runs of ``--seconds`` each, the three paths
in a rotating order; ratios are medians over the repeats (each run against
the open and floor runs of its repeat); the spread is the lowest and
highest. CPU of the uvicorn workers, of wrk and of redis-server is read
from /proc for every run. Every process started here is stopped by its pid.
Target (issue 30): limited / floor at least 0.90.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from typing import Any

from bench import endtoend
from bench.endtoend import ROOT, Gunicorn, _children, cpu_seconds
from bench.report import bench_parser, finish, print_table
from tests.support.redis_server import RedisServer

PATHS = {"limited": "/async/burst/", "open": "/open/async/burst/", "floor": "/floor/async/burst/"}
WORKERS = os.cpu_count() or 1
TARGET = 0.90
#: ``--middleware``: the example project's (Django's usual stack), or only ours.
SETTINGS = {"example": "bench.e2e_settings", "lean": "bench.e2e_asgi_settings"}


class Uvicorn(Gunicorn):
    """The example project's ASGI application under uvicorn on a free loopback port.

    ``endtoend.Gunicorn``'s set-up (port, environment, stop by pid), another server.
    """

    def __init__(self, redis_url: str, middleware: str, workers: int = WORKERS) -> None:
        super().__init__(redis_url, workers)
        self.env["DJANGO_SETTINGS_MODULE"] = SETTINGS[middleware]

    def start(self) -> None:
        command = [
            sys.executable, "-m", "uvicorn", "bench.e2e_asgi:application",
            "--host", "127.0.0.1", "--port", str(self.port),
            "--workers", str(self.workers_count),
            "--log-level", "warning", "--no-access-log",
        ]  # fmt: skip
        log = open(os.path.join(self.directory, "uvicorn.log"), "wb")  # noqa: SIM115
        self.process = subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=log, stderr=log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + PATHS["floor"], timeout=1) as response:
                    if response.status == 200 and len(self.workers()) >= self.workers_count:
                        return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"uvicorn did not answer; see {self.directory}/uvicorn.log")

    def workers(self) -> list[int]:
        """Return the workers' pids: the supervisor's children (one worker: uvicorn itself)."""
        assert self.process is not None
        if self.workers_count == 1:
            return [self.process.pid]
        return _children(self.process.pid)


def run(wrk: str, server: Uvicorn, redis_server: RedisServer, seconds: int, repeats: int) -> Any:
    assert redis_server.process is not None
    pids = {"workers": server.workers(), "redis": [redis_server.process.pid]}
    for path in PATHS.values():  # the workers' loops connected, scripts loaded
        endtoend.wrk_run(wrk, server.url + path, 1)
    runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in PATHS}
    kinds = list(PATHS)
    for repeat in range(repeats):
        shift = repeat % len(kinds)
        for kind in kinds[shift:] + kinds[:shift]:
            before = {k: cpu_seconds(v) for k, v in pids.items()}
            measured = endtoend.wrk_run(wrk, server.url + PATHS[kind], seconds)
            for k, v in pids.items():
                measured[f"{k}_cpu"] = cpu_seconds(v) - before[k]
            runs[kind].append(measured)
    ratios = {
        name: [a["rps"] / b["rps"] for a, b in zip(runs["limited"], runs[of], strict=True)]
        for name, of in (("limited/floor", "floor"), ("limited/open", "open"))
    }
    ratios["floor/open"] = [
        a["rps"] / b["rps"] for a, b in zip(runs["floor"], runs["open"], strict=True)
    ]
    return {
        "setup": {
            "uvicorn": f"{server.workers_count} workers",
            "settings": server.env["DJANGO_SETTINGS_MODULE"],
            "wrk": f"1 thread, {endtoend.CONNECTIONS} connections, {seconds} s runs",
            "repeats": repeats,
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
        },
        "runs": runs,
        "ratios": ratios,
        "median": {name: statistics.median(values) for name, values in ratios.items()},
        "cpu_per_request_us": {
            kind: statistics.median(r["workers_cpu"] / (r["rps"] * seconds) for r in kind_runs)
            * 1e6
            for kind, kind_runs in runs.items()
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__ or "", "endtoend_asgi.json", "1 s runs, 2 repeats")
    parser.add_argument("--seconds", type=int, default=3, help="length of one wrk run (3)")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each path (5)")
    parser.add_argument("--connections", type=int, default=50, help="wrk's connections (50)")
    parser.add_argument(
        "--middleware",
        choices=sorted(SETTINGS),
        default="example",
        help="example: the example project's MIDDLEWARE (Django's sessions, CSRF, auth, "
        "messages: each a thread hop per request under ASGI); lean: RateLimitMiddleware only",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.repeats = 1, 2
    endtoend.CONNECTIONS = args.connections
    wrk = shutil.which("wrk")
    if wrk is None:
        print("wrk is not installed: `make bench` installs it (apt-get install wrk)")
        return 2
    redis_server = RedisServer()
    redis_server.start()
    server = Uvicorn(redis_server.url, args.middleware)
    try:
        server.start()
        results = run(wrk, server, redis_server, args.seconds, args.repeats)
    finally:
        server.stop()
        redis_server.close()
    cpu = results["cpu_per_request_us"]
    print_table(
        f"End to end, async view: requests per second, uvicorn ({WORKERS} workers) + wrk "
        f"({args.connections} connections) on loopback, {args.seconds} s runs x {args.repeats}, "
        f"MIDDLEWARE: {args.middleware}",
        ["path", "req/s (median)", "workers' CPU µs/request"],
        [
            [
                f"{kind} {path}",
                f"{statistics.median(r['rps'] for r in results['runs'][kind]):.0f}",
                f"{cpu[kind]:.0f}",
            ]
            for kind, path in PATHS.items()
        ],
    )
    print()
    print_table(
        "Ratios (median of the repeats, lowest to highest)",
        ["ratio", "median", "spread"],
        [
            [name, f"{results['median'][name]:.3f}", f"{min(v):.3f} to {max(v):.3f}"]
            for name, v in results["ratios"].items()
        ],
    )
    got = results["median"]["limited/floor"]
    missed = [] if got >= TARGET else [f"limited / floor {got:.3f} (target >= {TARGET})"]
    return finish(args.json, results, missed, args.strict)


if __name__ == "__main__":
    sys.exit(main())
