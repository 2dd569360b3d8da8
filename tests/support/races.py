"""Races of the exactness suites: 16 threads here and 4 spawned processes hit at once.

``spawned_pool(serve, *args)`` starts the processes (``serve(*args, tasks,
results, start)``, see ``tests/support/workers.py``) and stops them; ``race(pool,
task, hit)`` hands ``task`` to every process and runs ``hit()`` from every
thread, all released by one barrier, and returns the hits allowed and
whether the processes were hitting while the threads were (unless the
machine is so busy that a process finishes before this one's threads run).
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

THREADS = 16
PROCESSES = 4
THREAD_ATTEMPTS = 20
PROCESS_ATTEMPTS = 40


@dataclass
class WorkerPool:
    tasks: list[Any]
    results: Any
    start: Any


@contextmanager
def spawned_pool(serve: Callable[..., None], *args: Any) -> Iterator[WorkerPool]:
    """Start PROCESSES spawned processes running ``serve(*args, tasks, results, start)``."""
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(THREADS + PROCESSES)
    results = context.Queue()
    tasks = [context.Queue() for _ in range(PROCESSES)]
    children = [context.Process(target=serve, args=(*args, q, results, start)) for q in tasks]
    for child in children:
        child.start()
    try:
        assert [results.get(timeout=60) for _ in children] == ["ready"] * PROCESSES
        yield WorkerPool(tasks, results, start)
    finally:
        for q in tasks:
            q.put(None)
        for child in children:
            child.join(60)
            if child.is_alive():
                child.kill()
                child.join()
    # -9: killed after a minute of not exiting; 1: an exception (on its stderr).
    exitcodes = [child.exitcode for child in children]
    assert exitcodes == [0] * PROCESSES, f"the processes exited with {exitcodes}"


def race(pool: WorkerPool, task: tuple[Any, ...], hit: Callable[[], bool]) -> tuple[int, bool]:
    """Give ``task`` to every process and call ``hit`` THREAD_ATTEMPTS times from every thread."""
    for q in pool.tasks:
        q.put(task)
    allowed = [0] * THREADS
    spans = [(0.0, 0.0)] * THREADS

    def worker(index: int) -> None:
        pool.start.wait(60)
        began = time.time()
        allowed[index] = sum(hit() for _ in range(THREAD_ATTEMPTS))
        spans[index] = (began, time.time())

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    reports = [pool.results.get(timeout=60) for _ in pool.tasks]
    threads_began, threads_ended = min(s[0] for s in spans), max(s[1] for s in spans)
    overlapped = all(began < threads_ended and threads_began < ended for _, began, ended in reports)
    return sum(allowed) + sum(report[0] for report in reports), overlapped
