"""Async decisions on the event loop: the loop's CPU per decision, and writes per decision.

(a) CPU of the deciding thread per decision: the sync path (``Policy.hit``,
a worker thread's CPU) against the async path (``Policy.ahit`` on one loop,
one decision at a time and 100 concurrent), in the same run, interleaved,
median of 5 runs; ``sliding_log`` (an EVALSHA) and ``fixed_window`` (its
MULTI/EXEC), a rate that allows everything.

(c) Socket writes per decision of the loop's auto-pipelined connection
(``backends/aio_pipe.py``) at 1, 10 and 100 concurrent decisions.

Usage: ``.venv/bin/python bench/async_decisions.py`` (starts and stops its
own redis-server). Figures go to docs/http.md ("Async views").
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ["DJANGO_SETTINGS_MODULE"] = "tests.sites.settings"

import django

django.setup()

from django.test import override_settings  # noqa: E402

from django_rl import get_policy  # noqa: E402
from django_rl.backends.aio_pools import async_pipe  # noqa: E402
from tests.support.redis_server import RedisServer, caches_for  # noqa: E402

DECISIONS, RUNS = 3000, 5
POLICIES = {
    "log": {"algorithm": "sliding_log", "rate": "100000000/h", "key": "ip"},
    "window": {"algorithm": "fixed_window", "rate": "100000000/h", "key": "ip"},
}


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


def main() -> None:
    server = RedisServer()
    server.start()
    try:
        with override_settings(CACHES=caches_for(server.url), DJANGO_RL={"POLICIES": POLICIES}):
            for name in POLICIES:
                rows: dict[str, list[float]] = {"sync": [], "async 1": [], "async 100": []}
                sync_cpu(name)  # warm up
                for _ in range(RUNS):
                    rows["sync"].append(sync_cpu(name))
                    rows["async 1"].append(asyncio.run(async_cpu(name, 1)))
                    rows["async 100"].append(asyncio.run(async_cpu(name, 100)))
                shown = ", ".join(
                    f"{label} {statistics.median(v) * 1e6:.0f} µs "
                    f"({min(v) * 1e6:.0f}-{max(v) * 1e6:.0f})"
                    for label, v in rows.items()
                )
                print(f"{name}: CPU per decision, median of {RUNS}: {shown}")
            for concurrent in (1, 10, 100):
                writes = asyncio.run(writes_per_decision(concurrent))
                print(f"writes per decision at {concurrent} concurrent: {writes:.3f}")
    finally:
        server.close()


if __name__ == "__main__":
    main()
