"""Where a gunicorn worker's CPU goes while wrk loads it: py-spy samples, grouped.

    python -m bench.profile_worker [--seconds N] [--rate HZ] [--top N] [--paths P ...]
                                   [--no-native] [--dump] [--quick] [--json PATH]

The example project (``bench/e2e_settings.py``, every request allowed) under
gunicorn with one sync worker, so every request lands on the worker sampled;
its own redis-server; wrk (1 thread, 8 connections) on each path in turn while
``py-spy record`` samples the worker (``--native``: C frames too, so the
system calls and hiredis show). Each sample is put in one group by its
innermost frame:

* **system calls**: a C frame of libc's system-call wrappers (``send``,
  ``recv``, ``poll``, ...), whoever called it;
* **django_rl**: Python code of this package (and C frames it calls directly,
  such as the interpreter's allocation under a django_rl line);
* **redis-py/hiredis**: redis-py's Python code, hiredis' C code;
* **Django**: Django and DRF;
* **other**: gunicorn, the standard library, the interpreter itself (its
  cyclic garbage collector is listed apart: it runs inside whichever
  allocation crosses its threshold, often a redis-py call's).

Printed per path: the worker's CPU per request (from ``/proc``), the groups'
shares of it in µs per request, and the top functions by own samples
(``--top``). Samples whose stack holds a django_rl frame are the limiter's
(the decision, its headers, the middleware): their split is printed too.
The limited endpoints and their open twins are profiled in the same run;
what a decision costs is the difference. ``--dump`` also prints one
``py-spy dump`` of the worker mid-run. Every process started here is
stopped by its pid before the script exits. Writes
``bench/results/profile_worker.json``.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.endtoend import CONNECTIONS, TICKS, Gunicorn
from bench.report import bench_parser, finish, print_table
from tests.support.redis_server import RedisServer

PATHS = ["/api/items/", "/open/api/items/", "/burst/", "/open/burst/"]
GROUPS = ("django_rl", "redis-py/hiredis", "system calls", "Django", "other")

#: libc's wrappers of the system calls a request makes (socket I/O, polling, time).
SYSCALLS = re.compile(
    r"^(__libc_|__GI_|__)?(send|sendto|sendmsg|recv|recvfrom|recvmsg|read|write|writev|"
    r"poll|ppoll|select|pselect6?|epoll_wait|epoll_pwait|accept4?|close|shutdown|"
    r"getpid|ioctl|fcntl|clock_gettime|gettimeofday|syscall|setsockopt|getsockopt|"
    r"getpeername|getsockname|connect)(64)?(_nocancel)?$"
)
#: CPython's cyclic garbage collector, in native frames.
GC_FUNCTIONS = frozenset({"gc_collect_main", "gc_collect_with_callback", "gc_collect_generations"})
#: py-spy's raw format: ``frame;frame;...;frame count``, outermost first.
FRAME = re.compile(r"^(?P<function>.*?) \((?P<where>[^()]*?)(?::(?P<line>\d+))?\)$")


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__ or "", "profile_worker.json", "3 s per path")
    parser.add_argument("--seconds", type=int, default=10, help="samples taken per path (10)")
    parser.add_argument("--rate", type=int, default=250, help="samples per second (250)")
    parser.add_argument("--top", type=int, default=25, help="functions listed per path (25)")
    parser.add_argument("--paths", nargs="+", default=PATHS, help="paths profiled in turn")
    parser.add_argument("--no-native", action="store_true", help="Python frames only")
    parser.add_argument("--dump", action="store_true", help="print one py-spy dump per path")
    parser.add_argument(
        "--stacks", type=Path, help="keep py-spy's raw stacks in this folder, a file per path"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = 3
    wrk = shutil.which("wrk")
    py_spy = shutil.which("py-spy") or _beside_python("py-spy")
    if wrk is None or py_spy is None:
        print("wrk and py-spy are needed: `make bench` installs both (wrk from Debian, py-spy")
        print("with the [bench] extra)")
        return 2
    redis_server = RedisServer()
    redis_server.start()
    gunicorn = Gunicorn(redis_server.url, workers=1)
    try:
        gunicorn.start()
        results = profile(wrk, py_spy, gunicorn, args)
    finally:
        gunicorn.stop()
        redis_server.close()
    return finish(args.json, results, [], False)


def _beside_python(name: str) -> str | None:
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else None


def profile(wrk: str, py_spy: str, gunicorn: Gunicorn, args: Any) -> dict[str, Any]:
    (worker,) = gunicorn.workers()
    for path in args.paths:  # warm the worker's connections, caches and code paths
        _wrk(wrk, gunicorn.url + path, 1)
    results: dict[str, Any] = {
        "setup": {
            "gunicorn": "1 sync worker",
            "wrk": f"1 thread, {CONNECTIONS} connections",
            "py-spy": f"{args.rate} Hz, {'python only' if args.no_native else 'native'}",
            "seconds": args.seconds,
            "load_average": os.getloadavg(),
        },
        "paths": {},
    }
    for path in args.paths:
        results["paths"][path] = one_path(wrk, py_spy, gunicorn, worker, path, args)
        print_path(path, results["paths"][path], args.top)
    print_comparison(results["paths"])
    return results


def one_path(
    wrk: str, py_spy: str, gunicorn: Gunicorn, worker: int, path: str, args: Any
) -> dict[str, Any]:
    """Measure ``path``'s worker CPU per request, then sample it; return the grouped profile.

    Two wrk runs: the first unsampled, for the worker's CPU per request (from
    ``/proc`` and wrk's count of requests); the second while py-spy records,
    for the shares (py-spy pauses the worker to sample it, which slows it down
    but does not change where its CPU goes).
    """
    user_before, system_before = _user_system(worker)
    requests = _wrk(wrk, gunicorn.url + path, args.seconds)
    user_after, system_after = _user_system(worker)
    user, system = user_after - user_before, system_after - system_before
    cpu = user + system
    with tempfile.TemporaryDirectory(prefix="django-rl-profile-") as directory:
        output = os.path.join(directory, "stacks.txt")
        load = subprocess.Popen(
            [wrk, "-t1", f"-c{CONNECTIONS}", f"-d{args.seconds + 2}s", gunicorn.url + path],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(0.5)
            record = [
                py_spy, "record", "--pid", str(worker), "--rate", str(args.rate),
                "--duration", str(args.seconds), "--format", "raw", "--output", output,
                "--threads", *([] if args.no_native else ["--native"]),
            ]  # fmt: skip
            spy = subprocess.Popen(record, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            dump = ""
            if args.dump:
                time.sleep(args.seconds / 2)
                dump = subprocess.run(
                    [py_spy, "dump", "--pid", str(worker)],
                    capture_output=True,
                    text=True,
                    timeout=30,
                ).stdout
            _, spy_errors = spy.communicate(timeout=args.seconds + 60)
        finally:
            load.wait(timeout=args.seconds + 30)
        if spy.returncode != 0 or not os.path.exists(output):
            raise RuntimeError(f"py-spy record failed:\n{spy_errors.decode(errors='replace')}")
        stacks = Path(output).read_text().splitlines()
        if args.stacks is not None:
            args.stacks.mkdir(parents=True, exist_ok=True)
            name = path.strip("/").replace("/", "_") or "root"
            (args.stacks / f"{name}.txt").write_text("\n".join(stacks) + "\n")
    grouped = group(stacks)
    grouped.update(
        {
            "requests_per_second": requests / args.seconds,
            "worker_cpu_us_per_request": cpu / requests * 1e6 if requests else 0.0,
            "worker_system_share": system / cpu if cpu else 0.0,
        }
    )
    if dump:
        grouped["dump"] = dump
        print(f"\npy-spy dump of the worker mid-run ({path}):\n{dump}")
    return grouped


def _user_system(pid: int) -> tuple[float, float]:
    """Return the user and the system CPU seconds ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICKS, int(fields[12]) / TICKS


def _wrk(wrk: str, url: str, seconds: int) -> int:
    """Load ``url`` for ``seconds``; return the requests served (all must succeed)."""
    result = subprocess.run(
        [wrk, "-t1", f"-c{CONNECTIONS}", f"-d{seconds}s", url],
        capture_output=True,
        text=True,
        timeout=seconds + 30,
        check=True,
    )
    served = re.search(r"(\d+) requests in", result.stdout)
    if served is None or "Non-2xx" in result.stdout or "Socket errors" in result.stdout:
        raise RuntimeError(f"wrk run against {url} went wrong:\n{result.stdout}")
    return int(served.group(1))


def parse_frame(text: str) -> tuple[str, str, bool]:
    """Return (function, file or library, native) of one frame of py-spy's raw output."""
    match = FRAME.match(text)
    if match is None:
        return text, "", True
    where = match["where"]
    return match["function"], where, not where.endswith(".py")


def group_of(stack: list[str]) -> tuple[str, str]:
    """Return the group of one sample and the function it is charged to (see the docstring)."""
    frames = [parse_frame(frame) for frame in stack]
    collecting = next((i for i, f in enumerate(frames) if f[2] and f[0] in GC_FUNCTIONS), None)
    if collecting is not None:
        # The cyclic garbage collector, run by whichever allocation crossed its
        # threshold: the interpreter's work, not the allocating function's.
        caller = next((f for f in reversed(frames[:collecting]) if not f[2]), None)
        where = _python_group(caller[1]) if caller else "other"
        return "other", f"garbage collection (triggered in {where} code)"
    function, where, native = frames[-1]
    if native and SYSCALLS.match(function) and ("libc" in where or "python" in where or not where):
        return "system calls", f"{function} ({_short(where)})"
    if native and "hiredis" in where:
        return "redis-py/hiredis", f"{function} (hiredis)"
    for function, where, native in reversed(frames):
        if native:
            continue
        return _python_group(where), f"{function} ({_short(where)})"
    return "other", f"{function} ({_short(where)})"


def _python_group(where: str) -> str:
    if "/django_rl/" in where or where.startswith("django_rl/"):
        return "django_rl"
    if "/redis/" in where or "hiredis" in where or where.startswith("redis/"):
        return "redis-py/hiredis"
    if where.startswith(("django/", "rest_framework/")) or "/django/" in where:
        return "Django"
    if "/rest_framework/" in where:
        return "Django"
    return "other"


def _short(where: str) -> str:
    for marker in ("site-packages/", "/django_rl/", "/lib/python3"):
        if marker in where:
            _, _, tail = where.partition(marker)
            return ("django_rl/" if marker == "/django_rl/" else "") + tail
    return os.path.basename(where) if "/" in where else where


def group(lines: list[str]) -> dict[str, Any]:
    """Group py-spy's raw stacks of the worker's main thread (the one serving requests).

    Samples blocked in ``poll`` before a read (a reply from Redis, a request
    from wrk) or an ``accept`` are waiting, not CPU: counted apart, left out
    of the shares.
    """
    groups: collections.Counter[str] = collections.Counter()
    limiter: collections.Counter[str] = collections.Counter()
    functions: collections.Counter[tuple[str, str]] = collections.Counter()
    waiting = total = 0
    for line in lines:
        stack_text, _, count_text = line.rpartition(" ")
        if not stack_text or not count_text.isdigit():
            continue
        count = int(count_text)
        thread, *stack = stack_text.split(";")
        if "MainThread" not in thread:
            continue  # the package's daemon threads (metrics, history, overrides)
        if not stack:
            continue
        if _waiting(stack):
            waiting += count
            continue
        name, function = group_of(stack)
        groups[name] += count
        functions[(name, function)] += count
        if any("/django_rl/" in frame or "(django_rl/" in frame for frame in stack):
            limiter[name] += count
        total += count
    return {
        "samples": total,
        "waiting_samples": waiting,
        "groups": dict(groups),
        "limiter_groups": dict(limiter),
        "functions": [
            {"group": name, "function": function, "samples": count}
            for (name, function), count in functions.most_common()
        ],
    }


#: C functions of a thread blocked until something arrives.
WAITS = ("sock_recv", "sock_recv_into", "sock_accept", "select_select", "select_poll_poll")


def _waiting(stack: list[str]) -> bool:
    leaf = parse_frame(stack[-1])[0]
    if not re.match(r"^(__libc_|__GI_|__)?(poll|ppoll|select|epoll_wait|accept4?)$", leaf):
        return False
    callers = [parse_frame(frame)[0] for frame in stack[-10:]]
    return any(name in WAITS for name in callers) or "accept" in leaf


def print_path(path: str, result: dict[str, Any], top: int) -> None:
    total = result["samples"] or 1
    per_request = result["worker_cpu_us_per_request"]
    print(
        f"\n{path}: {result['requests_per_second']:.0f} req/s (unsampled), worker CPU "
        f"{per_request:.0f} µs per request ({result['worker_system_share']:.0%} in the kernel), "
        f"{result['samples']} samples on CPU "
        f"({result['waiting_samples']} more waiting in poll for a reply or a request)"
    )
    rows = []
    for name in GROUPS:
        count = result["groups"].get(name, 0)
        mine = result["limiter_groups"].get(name, 0)
        rows.append(
            [
                name,
                f"{count / total:.1%}",
                f"{count / total * per_request:.1f}",
                f"{mine / total * per_request:.1f}",
            ]
        )
    limiter = sum(result["limiter_groups"].values())
    rows.append(["(all)", "100%", f"{per_request:.1f}", f"{limiter / total * per_request:.1f}"])
    print_table(
        f"Groups ({path})",
        ["group", "share", "µs / request", "µs / request under a django_rl frame"],
        rows,
    )
    rows = [
        [
            entry["group"],
            entry["function"],
            f"{entry['samples'] / total:.1%}",
            f"{entry['samples'] / total * per_request:.1f}",
        ]
        for entry in result["functions"][:top]
    ]
    header = ["group", "function", "share", "µs"]
    print_table(f"Top functions by own samples ({path})", header, rows)


def print_comparison(paths: dict[str, Any]) -> None:
    """Print each group's µs per request on each path side by side."""
    rows = []
    for name in (*GROUPS, "(all)"):
        row = [name]
        for result in paths.values():
            total = result["samples"] or 1
            count = result["samples"] if name == "(all)" else result["groups"].get(name, 0)
            row.append(f"{count / total * result['worker_cpu_us_per_request']:.1f}")
        rows.append(row)
    print_table("Worker CPU µs per request by group, every path", ["group", *paths], rows)


if __name__ == "__main__":
    sys.exit(main())
