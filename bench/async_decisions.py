"""Async decisions on the event loop: the loop's CPU per decision, and writes per decision.

(a) CPU of the deciding thread per decision: the sync path (``Policy.hit``,
a worker thread's CPU) against the async path (``Policy.ahit`` on one loop,
one decision at a time, and 2, 10 and 100 in flight, each in a task of its
own as an ASGI server's requests are), in the same run, interleaved,
median of 5 runs; ``sliding_log`` (an EVALSHA) and ``fixed_window`` (its
MULTI/EXEC), a rate that allows everything.

Beside them, in the same runs, each path's floor: one ``PING`` on a blocking
socket (the sync path's round trip and nothing else) and one ``PING``
awaited on a bare ``asyncio.Protocol`` (the loop's round trip and nothing
else: its ``epoll_wait`` calls, the reader callback, the future and the
task's wake-up). The loop's own cost per round trip is the gap between the
two floors; what a decision adds to its floor is django_rl's.

(c) Socket writes per decision of the loop's auto-pipelined connection
(``backends/aio_pipe.py``) at 1, 10 and 100 concurrent decisions.

Usage: ``.venv/bin/python bench/async_decisions.py`` (starts and stops its
own redis-server). Figures go to docs/http.md ("Async views").
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ["DJANGO_SETTINGS_MODULE"] = "tests.sites.settings"

import django

django.setup()

from django.test import override_settings  # noqa: E402

from django_rl import get_policy  # noqa: E402
from django_rl.backends.aio_pools import async_pipe  # noqa: E402
from tests.support.redis_server import RedisServer, caches_for  # noqa: E402

try:  # uvicorn runs on uvloop where it is installed (uvicorn[standard])
    import uvloop
except ImportError:  # pragma: no cover - optional
    uvloop = None

DECISIONS, RUNS = 3000, 5
#: Decisions in flight at once on the loop (1: one at a time, in the request's own task).
CONCURRENT = (1, 2, 10, 100)
POLICIES = {
    "log": {"algorithm": "sliding_log", "rate": "100000000/h", "key": "ip"},
    "window": {"algorithm": "fixed_window", "rate": "100000000/h", "key": "ip"},
}


PING = b"*1\r\n$4\r\nPING\r\n"


def sync_floor(port: int) -> float:
    """CPU per ``PING`` on a blocking socket: a sync round trip's floor."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(5.0)
        began = time.thread_time()
        for _ in range(DECISIONS):
            sock.sendall(PING)
            sock.recv(64)
        return (time.thread_time() - began) / DECISIONS


class _Ping(asyncio.Protocol):
    future: asyncio.Future[bytes] | None = None

    def data_received(self, data: bytes) -> None:
        if self.future is not None and not self.future.done():
            self.future.set_result(data)


async def async_floor(port: int) -> float:
    """CPU per ``PING`` awaited on a bare ``asyncio.Protocol``: a loop round trip's floor."""
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_connection(_Ping, "127.0.0.1", port)
    try:
        began = time.thread_time()
        for _ in range(DECISIONS):
            protocol.future = loop.create_future()
            transport.write(PING)
            await protocol.future
        return (time.thread_time() - began) / DECISIONS
    finally:
        transport.close()


def sync_cpu(name: str) -> float:
    policy = get_policy(name)
    began = time.thread_time()
    for _ in range(DECISIONS):
        policy.hit("ip:192.0.2.1")
    return (time.thread_time() - began) / DECISIONS


async def async_cpu(name: str, concurrent: int) -> float:
    policy = get_policy(name)
    await policy.ahit("ip:192.0.2.1")  # connected, the script known, the clock read
    began = time.thread_time()
    if concurrent == 1:
        # One at a time, as an async view awaits its decision: in the request's
        # own task (no task made per decision, which gather would add).
        for _ in range(DECISIONS):
            await policy.ahit("ip:192.0.2.1")
    else:
        for _ in range(DECISIONS // concurrent):
            await asyncio.gather(*(policy.ahit("ip:192.0.2.1") for _ in range(concurrent)))
    return (time.thread_time() - began) / DECISIONS


async def writes_per_decision(concurrent: int) -> float:
    policy = get_policy("log")
    await policy.ahit("ip:192.0.2.1")
    pipe = await async_pipe(policy.backend)  # type: ignore[arg-type]
    assert pipe is not None, "no auto-pipelined connection for this CACHES alias"
    before = pipe.writes
    for _ in range(DECISIONS // concurrent):
        await asyncio.gather(*(policy.ahit("ip:192.0.2.1") for _ in range(concurrent)))
    return (pipe.writes - before) / (DECISIONS // concurrent * concurrent)


def on_uvloop(coroutine: Any) -> Any:
    """Run ``coroutine`` on a uvloop event loop, as ``asyncio.run`` does on asyncio's own."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coroutine)


def main() -> None:
    server = RedisServer()
    server.start()
    try:
        with override_settings(CACHES=caches_for(server.url), DJANGO_RL={"POLICIES": POLICIES}):
            for name in POLICIES:
                rows: dict[str, list[float]] = {"sync": []}
                sync_cpu(name)  # warm up
                for _ in range(RUNS):
                    rows["sync"].append(sync_cpu(name))
                    for concurrent in CONCURRENT:
                        cpu = asyncio.run(async_cpu(name, concurrent))
                        rows.setdefault(f"async {concurrent}", []).append(cpu)
                    if uvloop is not None:
                        for concurrent in CONCURRENT:
                            cpu = on_uvloop(async_cpu(name, concurrent))
                            rows.setdefault(f"uvloop {concurrent}", []).append(cpu)
                    rows.setdefault("floor sync PING", []).append(sync_floor(server.port))
                    floor = asyncio.run(async_floor(server.port))
                    rows.setdefault("floor async PING", []).append(floor)
                    if uvloop is not None:
                        floor = on_uvloop(async_floor(server.port))
                        rows.setdefault("floor uvloop PING", []).append(floor)
                shown = ", ".join(
                    f"{label} {statistics.median(v) * 1e6:.0f} µs "
                    f"({min(v) * 1e6:.0f}-{max(v) * 1e6:.0f})"
                    for label, v in rows.items()
                )
                print(f"{name}: CPU per decision, median of {RUNS}: {shown}")
                floors = {"sync": "floor sync PING", "async 1": "floor async PING"}
                if uvloop is not None:
                    floors["uvloop 1"] = "floor uvloop PING"
                over = {
                    label: statistics.median(
                        d - f for d, f in zip(rows[label], rows[floor], strict=True)
                    )
                    for label, floor in floors.items()
                }
                shown = ", ".join(f"{label} {us * 1e6:.0f} µs" for label, us in over.items())
                print(f"{name}: over its floor (median of the runs' differences): {shown}")
            for concurrent in (1, 10, 100):
                writes = asyncio.run(writes_per_decision(concurrent))
                print(f"writes per decision at {concurrent} concurrent: {writes:.3f}")
    finally:
        server.close()


if __name__ == "__main__":
    main()
