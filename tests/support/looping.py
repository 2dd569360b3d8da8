"""Threads that keep working until a ``with`` block ends: the traffic of the fault suites.

A subclass gives :meth:`LoopingThreads._run` (one thread's loop, given its index,
until ``_stop`` is set) and whatever it records; entering the block starts
the threads, leaving it stops and joins them.
"""

from __future__ import annotations

import threading
from typing import TypeVar

L = TypeVar("L", bound="LoopingThreads")


class LoopingThreads:
    """``threads`` threads, each running ``_run(index)`` from the block's start to its end.

    :cvar join_timeout: how long leaving the block waits for each thread
        (``None``: as long as it takes).
    """

    join_timeout: float | None = None

    def __init__(self, threads: int) -> None:
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,)) for i in range(threads)]

    def __enter__(self: L) -> L:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._stopping()
        for thread in self._threads:
            thread.join(self.join_timeout)

    def _stopping(self) -> None:
        """Run as the block ends, after ``_stop`` is set and before the joins (a hook)."""

    def _run(self, index: int) -> None:
        raise NotImplementedError
