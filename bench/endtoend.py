"""End to end: the example project under gunicorn, loaded by wrk on loopback.

    python -m bench.endtoend [--seconds N] [--repeats N] [--unix-socket] [--quick] [--json PATH]

Requests per second of a small DRF endpoint with ``PolicyThrottle`` (fixed
window) against its twin without a throttle, and of a view decorated with
``@ratelimit`` (token bucket) against its undecorated twin. Every request is
allowed (the limits are out of reach): this is what the limiter costs a
request that gets through. Each twin also has a floor twin that makes one
round trip to Redis (a PING on the kept connection) and nothing else: what
any limiter that asks Redis once per request would cost at the least, on
this machine, in the same run.

Setup: its own redis-server, over loopback TCP (or, with ``--unix-socket``,
its Unix socket: a Redis on the app server's host); gunicorn with 2 x cores + 1 sync workers;
wrk with 1 thread and 8 connections, runs of ``--seconds`` each, the three
paths of an endpoint in a rotating order, ratios = medians over the repeats
of limited / open and floor / open (each run against the open run of its
repeat). CPU time of wrk, of the gunicorn workers and of redis-server is read
from /proc for every run, to show which one is the bottleneck. Every process
started here is stopped by its pid before the script exits.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.report import bench_parser, finish, print_table
from tests.support.redis_server import RedisServer, free_port

ROOT = Path(__file__).resolve().parent.parent
#: Each endpoint: the limited path, its unlimited twin, and its floor twin
#: (the unlimited twin plus one PING on the kept connection: bench/e2e_urls.py).
PAIRS = {
    "DRF endpoint (PolicyThrottle, fixed_window)": (
        "/api/items/",
        "/open/api/items/",
        "/floor/api/items/",
    ),
    "plain view (@ratelimit, token_bucket)": ("/burst/", "/open/burst/", "/floor/burst/"),
}
KINDS = ("limited", "open", "floor")
WORKERS = 2 * (os.cpu_count() or 1) + 1  # gunicorn's advice: (2 x cores) + 1
CONNECTIONS = 8
TICKS = os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__ or "", "endtoend.json", "2 pairs of 1 s runs")
    parser.add_argument("--seconds", type=int, default=2, help="length of one wrk run (2)")
    parser.add_argument("--repeats", type=int, default=8, help="pairs per endpoint (8)")
    parser.add_argument(
        "--unix-socket",
        action="store_true",
        help="the workers reach Redis over its Unix socket (a co-located Redis), not loopback TCP",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.repeats = 1, 2
    wrk = shutil.which("wrk")
    if wrk is None:
        print("wrk is not installed: `make bench` installs it (apt-get install wrk)")
        return 2
    redis_server = RedisServer()
    if args.unix_socket:
        socket_path = os.path.join(redis_server.directory, "redis.sock")
        redis_server.start(extra_args=["--unixsocket", socket_path, "--unixsocketperm", "700"])
        redis_url = f"unix://{socket_path}?db=0"
    else:
        redis_server.start()
        redis_url = redis_server.url
    gunicorn = Gunicorn(redis_url)
    try:
        gunicorn.start()
        results = run(
            wrk,
            gunicorn,
            redis_server,
            seconds=args.seconds,
            repeats=args.repeats,
            transport="Unix socket" if args.unix_socket else "loopback TCP",
        )
    finally:
        gunicorn.stop()
        redis_server.close()
    missed = [
        f"{name}: limited / open >= 0.85"
        for name, pair in results["pairs"].items()
        if pair["ratio"] < 0.85
    ]
    return finish(args.json, results, missed, args.strict)


class Gunicorn:
    """The example project under gunicorn, sync workers, on a free loopback port."""

    def __init__(self, redis_url: str, workers: int = WORKERS) -> None:
        self.workers_count = workers
        self.port = free_port()
        self.directory = tempfile.mkdtemp(prefix="django-rl-e2e-")
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "bench.e2e_settings",
            "REDIS_URL": redis_url,
            "EXAMPLE_DB": os.path.join(self.directory, "db.sqlite3"),
        }
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        command = [
            sys.executable, "-m", "gunicorn",
            "--workers", str(self.workers_count), "--worker-class", "sync",
            "--bind", f"127.0.0.1:{self.port}",
            "--log-level", "warning", "--error-logfile", os.path.join(self.directory, "error.log"),
            "example_project.wsgi:application",
        ]  # fmt: skip
        self.process = subprocess.Popen(command, cwd=ROOT, env=self.env)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/open/burst/", timeout=1) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"gunicorn did not answer; see {self.directory}/error.log")

    def workers(self) -> list[int]:
        """Return the pids of the master's worker processes."""
        assert self.process is not None
        return _children(self.process.pid)

    def stop(self) -> None:
        """SIGTERM the master (it stops its workers), SIGKILL after 10 s; then clean up."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                for pid in _children(process.pid):
                    os.kill(pid, signal.SIGKILL)
                process.kill()
                process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


def _children(pid: int) -> list[int]:
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                children.append(int(entry))
    return children


def cpu_seconds(pids: list[int]) -> float:
    """Return the user + system CPU time the processes have used so far."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / TICKS


def wrk_run(wrk: str, url: str, seconds: int) -> dict[str, float]:
    """Run wrk once; return requests per second and wrk's own CPU time."""
    before = os.times()
    result = subprocess.run(
        [wrk, "-t1", f"-c{CONNECTIONS}", f"-d{seconds}s", url],
        capture_output=True,
        text=True,
        timeout=seconds + 30,
        check=True,
    )
    after = os.times()
    rps = re.search(r"Requests/sec:\s+([0-9.]+)", result.stdout)
    if rps is None or "Non-2xx" in result.stdout or "Socket errors" in result.stdout:
        raise RuntimeError(f"wrk run against {url} went wrong:\n{result.stdout}")
    wrk_cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return {"rps": float(rps.group(1)), "wrk_cpu": wrk_cpu}


def run(
    wrk: str,
    gunicorn: Gunicorn,
    redis_server: RedisServer,
    *,
    seconds: int,
    repeats: int,
    transport: str = "loopback TCP",
) -> dict[str, Any]:
    assert redis_server.process is not None
    workers = gunicorn.workers()
    servers = {"workers": workers, "redis": [redis_server.process.pid]}
    for paths in PAIRS.values():  # warm the workers' connections and caches
        for path in paths:
            wrk_run(wrk, gunicorn.url + path, 1)
    results: dict[str, Any] = {
        "setup": {
            "gunicorn": f"{WORKERS} sync workers",
            "cpus": os.cpu_count(),
            "wrk": f"1 thread, {CONNECTIONS} connections, {seconds} s runs",
            "repeats": repeats,
            "load_average": os.getloadavg(),
            "redis": transport,
        },
        "pairs": {},
    }
    for name, paths in PAIRS.items():
        runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
        for repeat in range(repeats):
            shift = repeat % len(KINDS)
            order = list(zip(KINDS, paths, strict=True))
            for kind, path in order[shift:] + order[:shift]:
                cpu_before = {k: cpu_seconds(v) for k, v in servers.items()}
                measured = wrk_run(wrk, gunicorn.url + path, seconds)
                for k, v in servers.items():
                    measured[f"{k}_cpu"] = cpu_seconds(v) - cpu_before[k]
                runs[kind].append(measured)
        pair: dict[str, Any] = {"paths": list(paths), "runs": runs}
        for kind in KINDS:
            pair[f"{kind}_rps"] = statistics.median(r["rps"] for r in runs[kind])
            pair[f"{kind}_cpu_per_request"] = statistics.median(
                r["workers_cpu"] / (r["rps"] * seconds) for r in runs[kind]
            )
        for kind in ("limited", "floor"):
            pair["ratio" if kind == "limited" else "floor_ratio"] = statistics.median(
                a["rps"] / b["rps"] for a, b in zip(runs[kind], runs["open"], strict=True)
            )
        # Worker CPU a decision adds beyond the floor's one round trip.
        pair["beyond_floor_us"] = (
            pair["limited_cpu_per_request"] - pair["floor_cpu_per_request"]
        ) * 1e6
        results["pairs"][name] = pair
    print_results(results, seconds)
    return results


def print_results(results: dict[str, Any], seconds: int) -> None:
    rows = []
    for name, pair in results["pairs"].items():
        for kind, path in zip(KINDS, pair["paths"], strict=True):
            runs = pair["runs"][kind]
            cpu = {
                k: statistics.median(r[k] for r in runs) / seconds for k in runs[0] if "cpu" in k
            }
            ratio = {"limited": pair["ratio"], "floor": pair["floor_ratio"]}.get(kind)
            rows.append(
                [
                    name if kind == "limited" else "",
                    path,
                    f"{pair[f'{kind}_rps']:.0f}",
                    "" if ratio is None else f"{ratio:.3f}",
                    f"{cpu['wrk_cpu']:.0%}",
                    f"{cpu['workers_cpu']:.0%}",
                    f"{pair[f'{kind}_cpu_per_request'] * 1e6:.0f}",
                    f"{cpu['redis_cpu']:.0%}",
                ]
            )
    print_table(
        f"End to end: requests per second, gunicorn ({WORKERS} sync workers) + wrk on loopback, "
        f"Redis over {results['setup']['redis']}",
        [
            "endpoint",
            "path",
            "req/s (median)",
            "x open",
            "wrk CPU",
            "workers CPU",
            "worker CPU µs/request",
            "redis CPU",
        ],
        rows,
    )
    print(
        "\nCPU: share of one core over a run. /floor/ paths: the open view plus one PING on "
        "the kept connection (one round trip, nothing else). Target: limited / open >= 0.85."
    )
    for name, pair in results["pairs"].items():
        print(
            f"{name}: limited {pair['ratio']:.3f} of open, the floor {pair['floor_ratio']:.3f}; "
            f"worker CPU beyond the floor's round trip: {pair['beyond_floor_us']:.0f} µs/request"
        )


if __name__ == "__main__":
    sys.exit(main())
