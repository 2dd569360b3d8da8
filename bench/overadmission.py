"""Over-admission: clients racing on one identity at a limit of 100.

8 threads of one process (800 attempts), then 4 processes (400 attempts),
each starting at once from a barrier. A limiter that reads, decides in
Python, then writes (DRF's throttle) lets more than the limit through; one
that decides on the server lets exactly the limit through.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Sequence
from typing import Any

from bench.limiters import BY_NAME, Limiter

LIMIT = 100
THREADS, THREAD_ATTEMPTS = 8, 100
PROCESSES, PROCESS_ATTEMPTS = 4, 100


def addresses(index: int) -> list[str]:
    """Return [the raced address, a warm-up address], distinct for every limiter."""
    return [f"203.0.113.{index}", f"198.18.0.{index}"]


def race_threads(limiter: Limiter, index: int) -> int:
    """Return how many of 8 threads x 100 attempts were allowed."""
    decide = limiter.build(LIMIT, addresses(index))
    decide(1)  # connect and load scripts before the race
    barrier = threading.Barrier(THREADS)
    allowed = [0] * THREADS

    def worker(slot: int) -> None:
        barrier.wait()
        allowed[slot] = sum(decide(0) for _ in range(THREAD_ATTEMPTS))

    threads = [threading.Thread(target=worker, args=(slot,)) for slot in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(allowed)


def _process_worker(redis_url: str, tasks: Any, results: Any, barrier: Any) -> None:
    """Run races the parent sends (limiter name, index) until it sends None."""
    os.environ["BENCH_REDIS_URL"] = redis_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    from bench.runner import django_setup

    django_setup()
    while (task := tasks.get()) is not None:
        name, index = task
        decide = BY_NAME[name].build(LIMIT, addresses(index))
        decide(1)
        barrier.wait(60)
        results.put(sum(decide(0) for _ in range(PROCESS_ATTEMPTS)))


class ProcessPool:
    """4 worker processes with Django set up, started once for every race."""

    def __init__(self, redis_url: str) -> None:
        context = multiprocessing.get_context("spawn")
        self.barrier = context.Barrier(PROCESSES)
        self.results = context.Queue()
        self.tasks = [context.Queue() for _ in range(PROCESSES)]
        self.processes = [
            context.Process(
                target=_process_worker, args=(redis_url, tasks, self.results, self.barrier)
            )
            for tasks in self.tasks
        ]
        for process in self.processes:
            process.start()

    def race(self, limiter: Limiter, index: int) -> int:
        """Return how many of 4 processes x 100 attempts were allowed."""
        for tasks in self.tasks:
            tasks.put((limiter.name, index))
        return sum(self.results.get(timeout=120) for _ in self.processes)

    def close(self) -> None:
        """Stop the workers (by their pids: terminate any that do not finish)."""
        for tasks in self.tasks:
            tasks.put(None)
        for process in self.processes:
            process.join(30)
            if process.is_alive():
                process.terminate()
                process.join(5)


def over_admission(limiters: Sequence[Limiter], redis_url: str) -> dict[str, dict[str, int]]:
    """Race every limiter with threads, then with processes; return allowed counts."""
    results = {
        limiter.name: {"threads": race_threads(limiter, i)} for i, limiter in enumerate(limiters)
    }
    pool = ProcessPool(redis_url)
    try:
        for i, limiter in enumerate(limiters):
            results[limiter.name]["processes"] = pool.race(limiter, 100 + i)
    finally:
        pool.close()
    return results
