"""Gunicorn hooks for the metrics' multiprocess mode.

In ``gunicorn.conf.py``::

    from django_rl.observability.gunicorn import child_exit  # noqa: F401

A worker that exits leaves its counts in ``PROMETHEUS_MULTIPROC_DIR``
(counters keep them: they are part of the totals); this removes what must
not outlive it (live gauges), as prometheus_client's docs ask.

No ``post_fork`` hook is needed, ``--preload`` or not: ``metrics.py`` gives
every forked process new locks and its own flush thread itself
(``os.register_at_fork``), whoever forks it.
"""

from __future__ import annotations

from typing import Any


def child_exit(server: Any, worker: Any) -> None:
    """Gunicorn's ``child_exit`` hook: mark the worker's metrics files dead."""
    try:
        from prometheus_client import multiprocess
    except ImportError:
        return
    multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]
