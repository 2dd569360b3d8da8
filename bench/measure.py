"""How the decision benchmarks measure: time, commands, round trips, memory.

* Time: rounds of ``batch`` decisions per row, every row once per round, in a
  new random order each round (interleaved, so drift of a shared machine hits
  every row alike). A row's figure is the median of its rounds; ratios are
  the median of the per-round ratios (both rows measured moments apart).
  Wall time per decision, and this process's CPU time per decision (the
  Python work around the round trip, steadier than wall time on a busy host).
* Commands: ``INFO commandstats`` before and after, so commands that Lua
  scripts run count too.
* Round trips: writes to sockets (``socket.sendall``; a pipeline writes once,
  every write waits for its replies), counted in this process.
* Memory: ``MEMORY USAGE key SAMPLES 0`` summed over the keys one identity
  leaves behind.
"""

from __future__ import annotations

import gc
import os
import random
import socket
import stat
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis

Decide = Callable[[int], bool]


@dataclass
class Samples:
    """Per-round µs per decision of one row."""

    wall: list[float]
    cpu: list[float]

    def summary(self) -> dict[str, float]:
        return {
            "median_us": statistics.median(self.wall),
            "p25_us": _quantile(self.wall, 1),
            "p75_us": _quantile(self.wall, 3),
            "cpu_median_us": statistics.median(self.cpu),
        }


def _quantile(values: Sequence[float], quarter: int) -> float:
    return statistics.quantiles(values, n=4, method="inclusive")[quarter - 1]


def interleaved(
    rows: Mapping[str, Decide], *, rounds: int, batch: int, population: int, seed: int = 5
) -> dict[str, Samples]:
    """Time every row ``rounds`` times, ``batch`` decisions each, interleaved.

    Decision k of a round goes to client ``(offset + k) % population``, so
    every row spreads its hits over the same clients.
    """
    order = list(rows)
    shuffle = random.Random(seed).shuffle
    samples = {name: Samples([], []) for name in rows}
    for decide in rows.values():  # connect, load scripts, warm caches
        for i in range(min(population, 50)):
            decide(i)
    for round_index in range(rounds):
        offset = round_index * batch
        indexes = [(offset + k) % population for k in range(batch)]
        shuffle(order)
        gc.collect()
        for name in order:
            decide = rows[name]
            wall, cpu = time.perf_counter(), time.process_time()
            for i in indexes:
                decide(i)
            cpu = time.process_time() - cpu
            wall = time.perf_counter() - wall
            samples[name].wall.append(wall / batch * 1e6)
            samples[name].cpu.append(cpu / batch * 1e6)
    return samples


def alternating(
    rows: Mapping[str, Decide], *, decisions: int, population: int, seed: int = 7
) -> dict[str, Samples]:
    """Time single decisions of ``rows``, each call's row drawn at random.

    For rows to be compared with each other alone: every decision of one row
    has decisions of the others just before and after it, so what the machine
    does meanwhile (other processes, a cold cache after a collection) falls on
    them alike. ``Samples`` hold one decision's µs each.
    """
    names = list(rows)
    draw = random.Random(seed).randrange
    samples = {name: Samples([], []) for name in rows}
    for decide in rows.values():  # connect, load scripts, warm caches
        for i in range(min(population, 50)):
            decide(i)
    for k in range(decisions):
        name = names[draw(len(names))]
        decide = rows[name]
        wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
        decide(k % population)
        cpu = time.thread_time_ns() - cpu
        wall = time.perf_counter_ns() - wall
        samples[name].wall.append(wall / 1000)
        samples[name].cpu.append(cpu / 1000)
    return samples


def ratio(samples: Mapping[str, Samples], row: str, base: str) -> float:
    """Return the median over rounds of row / base (same round, moments apart)."""
    pairs = zip(samples[row].wall, samples[base].wall, strict=True)
    return statistics.median(a / b for a, b in pairs)


class SendCounter:
    """Count writes to sockets in this process while :meth:`counting` is active.

    Each round trip is one write (a pipeline or a transaction is one write;
    every write waits for its replies), whichever layer writes it: redis-py's
    ``send_packed_command`` (``socket.sendall``), or django_rl's kept
    connection, which writes an encoded decision to a plain socket's
    descriptor itself (``os.write``, ``connections._write``; only writes to
    a socket count). A write the kernel took in part counts twice, its rest
    going by ``sendall``: a decision's never does.
    """

    def __init__(self) -> None:
        self.sends = 0

    @contextmanager
    def counting(self) -> Iterator[None]:
        original_sendall, original_write = socket.socket.sendall, os.write
        counter = self

        def sendall(self: Any, *args: Any, **kwargs: Any) -> Any:
            counter.sends += 1
            return original_sendall(self, *args, **kwargs)

        def write(fd: int, data: Any) -> int:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                counter.sends += 1
            return original_write(fd, data)

        socket.socket.sendall = sendall  # type: ignore[method-assign]
        os.write = write
        try:
            yield
        finally:
            socket.socket.sendall = original_sendall  # type: ignore[method-assign]
            os.write = original_write


def command_calls(client: redis.Redis) -> dict[str, int]:
    """Return the server's calls per command so far (``INFO commandstats``)."""
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}


def commands_and_round_trips(
    decide: Decide, decisions: int, server: redis.Redis
) -> tuple[float, float, dict[str, float]]:
    """Return (commands, round trips, commands by name), per decision, for ``decisions`` calls."""
    counter = SendCounter()
    before = command_calls(server)
    with counter.counting():
        for i in range(decisions):
            decide(i)
        sends = counter.sends
    after = command_calls(server)
    delta = {
        name: (calls - before.get(name, 0)) / decisions
        for name, calls in after.items()
        if name != "info" and calls != before.get(name, 0)
    }
    return sum(delta.values()), sends / decisions, delta


def memory_per_identity(decide: Decide, hits: int, server: redis.Redis) -> dict[str, Any]:
    """Empty the server, make ``hits`` decisions for one client, return what it left."""
    server.flushall()
    allowed = sum(decide(0) for _ in range(hits))
    keys = sorted(server.scan_iter(count=1000))
    total = 0
    encodings = []
    for key in keys:
        total += int(server.memory_usage(key, samples=0) or 0)
        encodings.append(f"{server.type(key).decode()}/{server.object('encoding', key).decode()}")
    return {
        "bytes": total,
        "keys": len(keys),
        "encodings": sorted(set(encodings)),
        "allowed": allowed,
    }
