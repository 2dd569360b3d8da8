"""Prometheus metrics, through ``prometheus_client`` (the optional extra ``django-rl[prometheus]``).

Counters and a histogram in ``prometheus_client``'s default registry, made
at the first count with ``prometheus_client`` installed and
``DJANGO_RL["METRICS"]`` on (the default):

* ``django_rl_decisions_total{policy, result}``: every decision once (the
  front doors' and ``Policy.hit``'s, the drop-ins': DRF's under their
  policies, django-ratelimit's under ``@<group>``; a deny-cache answer
  too, as ``denied``). ``result`` is ``allowed``, ``denied``, ``shadow_denied`` (a
  policy in shadow mode would have denied: the request went on),
  ``degraded_allowed`` or ``degraded_denied`` (Redis could not answer: the
  outage fallback or ``fail_open`` decided).
* ``django_rl_deny_cache_answers_total{policy}``: denials answered by the
  process's deny cache, without Redis.
* ``django_rl_redis_errors_total{kind}``: calls Redis could not answer, by
  kind (``backends/errors.py``: ``connection``, ``timeout``, ``oom``, ...).
* ``django_rl_redis_seconds``: the Redis round trip of each decision that
  asked Redis (a histogram).

No label carries an identity: ``policy`` is a policy's name (bounded by
the settings and the views), ``kind`` one of a fixed set.

Under gunicorn with several workers, set ``PROMETHEUS_MULTIPROC_DIR`` to an
empty directory before the workers start (prometheus_client's multiprocess
mode): each worker writes its counts there, :func:`metrics_view` adds them
up, and ``child_exit`` in ``django_rl.observability.gunicorn`` clears a dead
worker's gauges. docs/observability.md says how.

A decision pays for an add to this process's own counts under a lock (and,
if it asked Redis, its latency put in a bucket of the process's own,
``counts.PendingLatencies``: a bisect and two adds), not for
prometheus_client's ``inc`` and ``observe`` (a label lookup, checks, and a
lock per value; a write to a memory-mapped file in multiprocess mode). The
pending counts reach the metrics whenever the registry is collected (by
:func:`metrics_view` or any exporter: ``counts.Collector`` flushes first)
and from a daemon thread once a second, so a scrape of another worker sees
them at most about a second late. ``make bench`` measures the cost.

**Forks** (gunicorn's ``--preload``, Celery's prefork pool): a child makes
new locks and starts with nothing pending (what its parent counted stays
the parent's), and its first count starts its own flush thread; a fork
waits for a flush under way, so no lock of the metrics is held in the
child (``os.register_at_fork``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from typing import Any

from django.http import HttpRequest, HttpResponse

from django_rl.conf import forget_on_change
from django_rl.core.decision import Decision
from django_rl.observability.counts import (
    FLUSH_INTERVAL,
    LATENCY_BUCKETS,
    RESULTS,
    Metrics,
    result_of,
)

logger = logging.getLogger("django_rl")

prometheus_client: Any
try:
    import prometheus_client
except ImportError:  # the extra is not installed: nothing is counted
    prometheus_client = None

__all__ = [
    "FLUSH_INTERVAL",
    "LATENCY_BUCKETS",
    "RESULTS",
    "count_decision",
    "count_decisions",
    "count_deny_cache_answer",
    "count_redis_error",
    "count_result",
    "metrics",
    "metrics_view",
    "observe_redis_seconds",
]

_metrics: Metrics | None = None
_enabled: bool | None = None
#: Whether :data:`_metrics` counts in this process: on, made, its flush
#: thread started. The one global the decisions' path reads.
_ready = False
_making = threading.Lock()


def metrics() -> Metrics | None:
    """Return this process's metrics, or ``None`` when they are off or cannot be made.

    Starts this process's flush thread if it does not run: at the first
    count, and at the first in a forked child.
    """
    global _metrics, _enabled, _ready
    if _ready:
        return _metrics
    if _enabled is None:
        from django_rl.conf import get_settings

        _enabled = prometheus_client is not None and get_settings().metrics
    if not _enabled:
        return None
    with _making:
        if _metrics is None:
            try:
                _metrics = Metrics(prometheus_client)
            except Exception:  # counting must never fail a decision
                logger.exception("django_rl's metrics could not be made: nothing is counted")
                _enabled = False
                return None
        _metrics.start()
        _ready = True
    return _metrics


def _reread() -> None:
    global _enabled, _ready
    _ready = False
    _enabled = None


forget_on_change(_reread)


def _before_fork() -> None:
    if _metrics is not None:
        _metrics.before_fork()


def _after_fork_in_parent() -> None:
    if _metrics is not None:
        _metrics.after_fork_in_parent()


def _after_fork_in_child() -> None:
    global _making, _ready
    _making = threading.Lock()
    _ready = False  # the next count starts this process's flush thread
    if _metrics is not None:
        _metrics.after_fork_in_child()


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)


def count_decision(policy: str, decision: Decision) -> None:
    """Count one decision of ``policy`` (see the module)."""
    # What metrics(), result_of and Metrics.count_decision do, written out
    # for the usual case: this runs on every decision.
    found = _metrics if _ready else metrics()
    if found is not None:
        allowed = decision.allowed and not decision.degraded
        key = (policy, "allowed" if allowed else result_of(decision))
        with found.counting:
            decisions = found.pending_decisions
            decisions[key] = decisions.get(key, 0) + 1


def count_result(policy: str, result: str) -> None:
    """Count one decision of ``policy`` whose ``result`` label is known (one of :data:`RESULTS`).

    For front doors that decide without a :class:`Decision` (the
    django-ratelimit drop-in).
    """
    found = _metrics if _ready else metrics()
    if found is not None:
        key = (policy, result)
        with found.counting:
            decisions = found.pending_decisions
            decisions[key] = decisions.get(key, 0) + 1


def count_decisions(decided: Iterable[tuple[str, Decision]]) -> None:
    """Count each ``(policy, decision)`` as :func:`count_decision` does, under one lock.

    For the Decisions of one request of several policies.
    """
    found = _metrics if _ready else metrics()
    if found is not None:
        keys = [
            (policy, "allowed" if d.allowed and not d.degraded else result_of(d))
            for policy, d in decided
        ]
        with found.counting:
            decisions = found.pending_decisions
            for key in keys:
                decisions[key] = decisions.get(key, 0) + 1


def count_deny_cache_answer(policy: str) -> None:
    found = metrics()
    if found is not None:
        found.count_answer(policy)


def count_redis_error(kind: str) -> None:
    found = metrics()
    if found is not None:
        found.count_error(kind)


def observe_redis_seconds(seconds: float) -> None:
    found = metrics()
    if found is not None:
        found.pending.observe(seconds)


def metrics_view(request: HttpRequest) -> HttpResponse:
    """Serve the metrics in Prometheus's text format (every worker's, in multiprocess mode).

    Route it where your scraper looks, and keep it from the public (a
    network rule, or your own authentication around it)::

        path("metrics/", metrics_view)

    Answers 404 when ``METRICS`` is off, or when ``prometheus_client`` is
    not installed (saying so, and how to install it).
    """
    found = metrics()
    if found is None or prometheus_client is None:
        return HttpResponse(_why_none(), status=404, content_type="text/plain")
    found.flush()  # in multiprocess mode, the registry below does not collect this process's
    registry: Any = prometheus_client.REGISTRY
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = prometheus_client.CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    body = prometheus_client.generate_latest(registry)
    return HttpResponse(body, content_type=prometheus_client.CONTENT_TYPE_LATEST)


def _why_none() -> str:
    """Return why there are no metrics to serve: the setting, or the missing package."""
    from django_rl.conf import get_settings

    if not get_settings().metrics:
        return 'metrics are off: DJANGO_RL["METRICS"] is False\n'
    return (
        'metrics are on (DJANGO_RL["METRICS"]) but prometheus_client is not installed: '
        "pip install prometheus_client "
        "(or django_rl's `prometheus` extra)\n"
    )
