"""CPU instructions per decision, counted by callgrind: this checkout, and another beside it.

    python -m bench.instructions [--before DIR] [--decisions 1000] [--rows "ROW" ...] [--async]
                                 [--json PATH]

Wall-clock µs on a shared 2-core machine move by 10-15 % from run to run
(``bench.compare``'s A/A runs); instructions do not. Each row of
``bench.limiters`` (the rows of ``bench.decisions``) runs in a child
process under ``valgrind --tool=callgrind`` against one redis-server the
bench starts (outside valgrind): the child builds the row, warms it up
(200 decisions), then counts ``--decisions`` more. Only those are counted:
callgrind zeroes its counters when the child calls ``os.getppid()`` right
before them (``--zero-before=os_getppid``) and the child ends with
``os._exit`` right after, so neither start-up nor shutdown is in the
figure; and only the child's main thread (``--separate-threads``): the
overrides loader's and the history writer's rounds fall when the clock
says, not per decision. ``PYTHONHASHSEED=0`` in every child. Two runs of
one checkout agreed within 0.7 % (token_bucket: Policy.hit, 71,723 and
71,412 against 72,176 and 72,171).

The client's own work only: the round trip's wait is in the kernel and in
Redis, which callgrind does not count. ``--before DIR`` (e.g. ``git archive
<commit> | tar -x -C DIR``) runs every row in that checkout too (its
``django_rl``, ``bench`` and ``tests`` first on ``PYTHONPATH``), both sides at
once, and prints after / before. Needs valgrind (``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.report import print_table
from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent

#: The rows counted by default: the floor of one round trip on django_rl's
#: connection, and every django_rl row of bench.decisions.
DEFAULT_ROWS = [
    "PING on django_rl's kept connection",
    "raw EVALSHA of `return 1`",
    *(
        f"{algorithm}: {door}"
        for algorithm in ("fixed_window", "sliding_log", "token_bucket", "gcra", "sliding_window")
        for door in ("Policy.hit", "@ratelimit", "PolicyThrottle")
    ),
    "fixed_window: @ratelimit(rate=...) inline",
]

#: Every child's start: its arguments, and Django set up on the bench's settings.
_SETUP = """
import gc, os, sys
row, decisions, url = sys.argv[1], int(sys.argv[2]), sys.argv[3]
os.environ["BENCH_REDIS_URL"] = url
os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
from bench.runner import django_setup
django_setup()
"""

#: What a child runs: ``python -c CHILD ROW DECISIONS URL``.
CHILD = (
    _SETUP
    + """
from bench.limiters import BY_NAME
addresses = [f"10.0.{i // 256}.{i % 256}" for i in range(50)]
decide = BY_NAME[row].build(1_000_000, addresses)
for i in range(200):
    decide(i % 50)
def run(n):
    for k in range(n):
        decide(k % 50)
gc.collect()
os.getppid()  # callgrind zeroes its counters here (--zero-before=os_getppid)
run(decisions)
sys.stdout.flush()
os._exit(0)  # and writes them now: the decisions only
"""
)


#: The awaited rows (``--async``): ``Policy.ahit`` one decision at a time on
#: asyncio's loop and on uvloop, each beside its floor, one PING awaited on
#: django_rl's auto-pipelined connection (``backends/aio_pipe.py``).
ASYNC_ROWS = [
    "PING on a blocking socket",
    *(
        f"{what} on {loop}"
        for loop in ("asyncio", "uvloop")
        for what in (
            "PING awaited on a bare asyncio.Protocol",
            "PING awaited on django_rl's pipe",
            "sliding_log: Policy.ahit",
            "token_bucket: Policy.ahit",
            "fixed_window: Policy.ahit",
        )
    ),
]

#: What an awaited row's child runs (``ASYNC_ROWS``): as :data:`CHILD`, each
#: decision awaited in the loop's one task, as a view awaits its own.
ASYNC_CHILD = (
    _SETUP
    + """
import asyncio
from bench.limiters import _policy
from django_rl.backends import get_backend
from django_rl.backends.aio_pools import async_pipe
from urllib.parse import urlsplit
address = (urlsplit(url).hostname, urlsplit(url).port)
identities = [f"ip:10.0.{i // 256}.{i % 256}" for i in range(50)]
PING = b"*1\\r\\n$4\\r\\nPING\\r\\n"
if row == "PING on a blocking socket":  # the sync path's floor: a round trip, nothing else
    import socket
    sock = socket.create_connection(address)
    sock.settimeout(5.0)
    for i in range(200):
        sock.sendall(PING)
        sock.recv(64)
    gc.collect()
    os.getppid()  # callgrind zeroes its counters here
    for k in range(decisions):
        sock.sendall(PING)
        sock.recv(64)
    sys.stdout.flush()
    os._exit(0)
what, loop = row.rsplit(" on ", 1)
class Bare(asyncio.Protocol):
    future = None
    def data_received(self, data):
        self.future.set_result(data)
async def main():
    if what == "PING awaited on a bare asyncio.Protocol":  # the loop's floor
        running = asyncio.get_running_loop()
        transport, bare = await running.create_connection(Bare, *address)
        def decide(i):
            bare.future = running.create_future()
            transport.write(PING)
            return bare.future
    elif what.startswith("PING"):
        pipe = await async_pipe(get_backend("default"))
        decide = lambda i: pipe.exchange(PING, 1)
    else:
        ahit = _policy(what.split(":")[0], 1_000_000).ahit
        decide = lambda i: ahit(identities[i])
    for i in range(200):
        await decide(i % 50)
    gc.collect()
    os.getppid()  # callgrind zeroes its counters here
    for k in range(decisions):
        await decide(k % 50)
    sys.stdout.flush()
    os._exit(0)
if loop == "uvloop":
    import uvloop
    uvloop.run(main())
else:
    asyncio.run(main())
"""
)


def count(checkout: Path, row: str, decisions: int, url: str) -> float:
    """Return the instructions per decision of ``row`` in ``checkout`` (its main thread)."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "callgrind.out"
        env = {**os.environ, "PYTHONPATH": str(checkout), "PYTHONHASHSEED": "0"}
        subprocess.run(
            [
                "valgrind", "--tool=callgrind", "--separate-threads=yes",
                "--zero-before=os_getppid", f"--callgrind-out-file={out}",
                sys.executable, "-c", ASYNC_CHILD if row in ASYNC_ROWS else CHILD,
                row, str(decisions), url,
            ],
            cwd=checkout, env=env, check=True, capture_output=True,
        )  # fmt: skip
        main_thread = Path(f"{out}-01").read_text()
    found = re.search(r"^(?:summary|totals): (\d+)", main_thread, re.MULTILINE)
    if found is None:
        raise RuntimeError(f"no totals in callgrind's output for {row!r} in {checkout}")
    return int(found.group(1)) / decisions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--before", type=Path, help="another checkout, counted beside this one")
    parser.add_argument("--decisions", type=int, default=1000, help="decisions counted per row")
    parser.add_argument("--rows", nargs="+", default=DEFAULT_ROWS, help="rows of bench.limiters")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument(
        "--async", dest="awaited", action="store_true", help="add the awaited rows (ASYNC_ROWS)"
    )
    args = parser.parse_args(argv)
    if args.awaited:
        args.rows = [*args.rows, *ASYNC_ROWS]
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    sides = {"after": ROOT} if args.before is None else {"before": args.before, "after": ROOT}
    server = RedisServer()
    server.start()
    results: dict[str, dict[str, float]] = {}
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(sides)) as pool:
            for row in args.rows:
                futures = {
                    side: pool.submit(count, path.resolve(), row, args.decisions, server.url)
                    for side, path in sides.items()
                }
                results[row] = {side: future.result() for side, future in futures.items()}
                print(f"  {row}: " + ", ".join(f"{s} {v:,.0f}" for s, v in results[row].items()))
    finally:
        server.stop()
    header = ["row", *(f"instructions, {side}" for side in sides)]
    if args.before is not None:
        header.append("after / before")
    rows = []
    for row, figures in results.items():
        cells = [row, *(f"{figures[side]:,.0f}" for side in sides)]
        if args.before is not None:
            cells.append(f"{figures['after'] / figures['before']:.3f}")
        rows.append(cells)
    print_table(
        f"CPU instructions per decision (callgrind, {args.decisions} decisions a row)", header, rows
    )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
