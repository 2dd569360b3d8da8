"""What one Redis core sustains: commands, bytes and server CPU per decision (docs/scaling.md).

    python -m bench.scaling [--seconds 3] [--repeats 2] [--quick] [--json PATH]

Starts its own redis-server on a free port, with a replica (so the primary
pays for replication, as in production), and stops both. Then:

1. per decision, from one thread through ``Policy.hit``: commands (``INFO
   commandstats``, those Lua runs included), bytes received and sent by the
   server (``total_net_input_bytes``, ``total_net_output_bytes``), bytes of
   the replication stream (``master_repl_offset``); allowed decisions, and
   denied ones with the deny cache off;
2. load through django_rl's own code: worker processes of threads that call
   ``Policy.hit`` (or PING) in a loop, each thread on its own connection,
   one decision per round trip, as app servers make them. Reported: decisions
   per second, and decisions per second of the server's main thread's CPU
   time (``used_cpu_*_main_thread``), which is what one Redis core sustains
   at 100% whatever the load generator managed;
3. the same for the two Lua scripts with ``redis-benchmark`` (50 connections,
   no pipelining, random identities), as a check that does not go through
   Python at all (it cannot send a MULTI/EXEC block, so ``fixed_window`` has
   no row there).

Loads run ``--repeats`` times (default 2); every figure is printed per run.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import platform
import re
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.report import print_table
from tests.support.redis_server import RedisServer

ALGORITHMS = ("fixed_window", "sliding_log", "token_bucket")
ALLOW = 1_000_000  # per hour: every decision of the runs is allowed
DENY = 10  # per hour: used up first, so every decision is denied
POPULATION = 10_000
COUNTED = 2_000
PROCESSES = 2
THREADS = 6


def policies() -> dict[str, dict[str, Any]]:
    specs: dict[str, dict[str, Any]] = {}
    for algorithm in ALGORITHMS:
        for kind, limit in (("allow", ALLOW), ("deny", DENY)):
            spec: dict[str, Any] = {"algorithm": algorithm, "rate": f"{limit}/h", "key": "ip"}
            if algorithm == "token_bucket":
                spec["capacity"] = limit
            if algorithm == "gcra":
                spec["burst"] = limit
            specs[f"{algorithm}-{kind}"] = spec
    return specs


def setup_django(url: str) -> None:
    from django.conf import settings

    if settings.configured:
        return
    settings.configure(
        INSTALLED_APPS=["django_rl"],
        CACHES={
            "default": {
                "BACKEND": "django_redis.cache.RedisCache",
                "LOCATION": url,
                "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 1},
            }
        },
        # The deny rows measure what a denial costs Redis: no local answers.
        DJANGO_RL={"KEY_PREFIX": "rl", "POLICIES": policies(), "DENY_CACHE_SIZE": 0},
    )
    import django

    django.setup()


def identity(i: int) -> str:
    return f"ip:10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}"


def snapshot(admin: Any) -> dict[str, float]:
    """Return the server counters the per-decision figures are differences of."""
    stats = admin.info("stats")
    calls = sum(int(s["calls"]) for s in admin.info("commandstats").values())
    offset = admin.info("replication")["master_repl_offset"]
    cpu = admin.info("cpu")
    return {
        "in": stats["total_net_input_bytes"],
        "out": stats["total_net_output_bytes"],
        "commands": calls,
        "repl": offset,
        "cpu": cpu["used_cpu_user_main_thread"] + cpu["used_cpu_sys_main_thread"],
    }


def per_decision(admin: Any) -> list[dict[str, Any]]:
    """Commands and bytes per decision, one thread, counters read around COUNTED decisions."""
    rows = []
    # The counters' own reads, measured with nothing between them.
    empty = [_delta(snapshot(admin), snapshot(admin)) for _ in range(5)]
    overhead = {k: min(e[k] for e in empty) for k in empty[0]}
    for name in ["ping"] + [f"{a}-{k}" for k in ("allow", "deny") for a in ALGORITHMS]:
        admin.flushall()
        decide = _decider(name, population=100)
        if name != "ping":
            for i in range(100):
                for _ in range(DENY if name.endswith("deny") else 1):
                    decide(i)  # warm: connect, clock, script; used up for deny
        before = snapshot(admin)
        for i in range(COUNTED):
            decide(i)
        delta = _delta(before, snapshot(admin))
        rows.append(
            {
                "row": name,
                **{
                    k: round((delta[k] - overhead[k]) / COUNTED, 1)
                    for k in ("commands", "in", "out", "repl")
                },
            }
        )
    return rows


def _decider(name: str, population: int = POPULATION) -> Callable[[int], object]:
    """Return a function that makes decision ``i`` of row ``name`` (``"ping"``: a PING)."""
    from django_rl import get_policy
    from django_rl.backends import get_backend

    if name == "ping":
        client = get_backend("default").node_for("x").client  # as decisions' kept connection
        return lambda i: client.ping()
    policy = get_policy(name)
    return lambda i: policy.hit(identity(i % population))


def _delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in before}


def _load_worker(url: str, name: str, seconds: float, barrier: Any, results: Any) -> None:
    setup_django(url)
    counts = [0] * THREADS

    def run(index: int) -> None:
        hit = _decider(name)
        hit(index)  # connect, clock, script
        barrier.wait(60)
        deadline = time.monotonic() + seconds
        i, done = index * 7919, 0
        while time.monotonic() < deadline:
            for _ in range(50):
                hit(i % POPULATION)
                i += 1
            done += 50
        counts[index] = done

    threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results.put(sum(counts))


def load(server: RedisServer, admin: Any, name: str, seconds: float) -> dict[str, Any]:
    """Decisions per second through Policy.hit from PROCESSES x THREADS connections."""
    admin.flushall()
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(PROCESSES * THREADS + 1)
    results = context.Queue()
    workers = [
        context.Process(target=_load_worker, args=(server.url, name, seconds, barrier, results))
        for _ in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    try:
        barrier.wait(120)
        before, started = snapshot(admin), time.monotonic()
        decisions = sum(results.get(timeout=seconds + 60) for _ in workers)
        after, elapsed = snapshot(admin), time.monotonic() - started
    finally:
        for worker in workers:
            worker.join(30)
            if worker.is_alive():
                worker.kill()
                worker.join()
    cpu = after["cpu"] - before["cpu"]
    return _rates(name, decisions, elapsed, cpu, "Policy.hit" if name != "ping" else "PING")


def _rates(name: str, decisions: int, elapsed: float, cpu: float, via: str) -> dict[str, Any]:
    return {
        "row": name,
        "via": via,
        "decisions": decisions,
        "per_second": round(decisions / elapsed),
        "server_cpu": round(cpu / elapsed * 100),
        "per_core_second": round(decisions / cpu) if cpu else 0,
        "server_cpu_us": round(cpu / decisions * 1e6, 2) if decisions else 0,
    }


def benchmark(server: RedisServer, admin: Any, name: str, requests: int) -> dict[str, Any]:
    """Run a script (or PING) with redis-benchmark: 50 connections, no pipelining."""
    from django_rl.algorithms.sliding_log import SCRIPT as SLIDING_LOG
    from django_rl.algorithms.token_bucket import SCRIPT as TOKEN_BUCKET

    admin.flushall()
    key = "rl:b:{ip:__rand_int__}:00000000"
    if name == "ping":
        command = ["PING"]
    elif name.startswith("sliding_log"):
        admin.script_load(SLIDING_LOG.source)
        command = ["EVALSHA", SLIDING_LOG.sha, "1", key, "3600000", str(ALLOW), "1", "1"]
    else:
        admin.script_load(TOKEN_BUCKET.source)
        command = ["EVALSHA", TOKEN_BUCKET.sha, "1", key, str(ALLOW), str(ALLOW), "3600000"]
        command += ["1", "1"]
    args = ["redis-benchmark", "-p", str(server.port), "-c", "50", "-n", str(requests)]
    args += ["-r", str(POPULATION), "--threads", "2", "--csv", *command]
    before, started = snapshot(admin), time.monotonic()
    out = subprocess.run(args, capture_output=True, text=True, timeout=600, check=True).stdout
    after, elapsed = snapshot(admin), time.monotonic() - started
    match = re.search(r'^"[^"]*","([0-9.]+)"', out, re.MULTILINE)
    # Its own figure leaves out its start and its connecting.
    rps = float(match.group(1)) if match else requests / elapsed
    return _rates(name, requests, requests / rps, after["cpu"] - before["cpu"], "redis-benchmark")


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per load run (3)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each load (2)")
    parser.add_argument("--quick", action="store_true", help="1 s runs, once: a smoke test")
    parser.add_argument("--json", type=Path, default=Path("bench/results/scaling.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.repeats = 1.0, 1
    primary, replica = RedisServer(), RedisServer()
    primary.start(extra_args=["--repl-diskless-sync-delay", "0"])
    replica.start(extra_args=["--replicaof", "127.0.0.1", str(primary.port)])
    try:
        replica.wait_until_synced()
        results = run(primary, args.seconds, args.repeats)
    finally:
        replica.close()
        primary.close()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nJSON: {args.json}")
    return 0


def run(server: RedisServer, seconds: float, repeats: int) -> dict[str, Any]:
    setup_django(server.url)
    admin = server.client()
    info = admin.info("server")
    results: dict[str, Any] = {
        "environment": {
            "python": platform.python_version(),
            "redis_server": info["redis_version"],
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
        }
    }
    print(
        f"Python {platform.python_version()}, redis-server {info['redis_version']} with a "
        f"replica, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    results["per_decision"] = rows = per_decision(admin)
    print_table(
        f"Per decision ({COUNTED:,} from one thread; bytes as the server counts them)",
        ["row", "commands", "bytes in", "bytes out", "replication bytes"],
        [[r["row"], r["commands"], r["in"], r["out"], r["repl"]] for r in rows],
    )
    loads = []
    for repeat in range(repeats):
        for name in ["ping"] + [f"{a}-allow" for a in ALGORITHMS]:
            loads.append({"run": repeat + 1, **load(server, admin, name, seconds)})
        for name in ["ping", "sliding_log-allow", "token_bucket-allow"]:
            loads.append({"run": repeat + 1, **benchmark(server, admin, name, 200_000)})
    results["load"] = loads
    print_table(
        f"Load ({PROCESSES} processes x {THREADS} threads through Policy.hit, "
        f"{seconds:g} s; redis-benchmark: 50 connections)",
        ["run", "row", "via", "decisions/s", "server CPU", "µs server CPU", "per core-second"],
        [
            [
                r["run"],
                r["row"],
                r["via"],
                f"{r['per_second']:,}",
                f"{r['server_cpu']}%",
                r["server_cpu_us"],
                f"{r['per_core_second']:,}",
            ]
            for r in loads
        ],
    )
    return results


if __name__ == "__main__":
    raise SystemExit(main())
