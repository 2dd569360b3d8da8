"""Prometheus metrics, through ``prometheus_client`` (the optional extra ``django-rl[prometheus]``).

Counters and a histogram in ``prometheus_client``'s default registry, made
when this module is first imported with ``prometheus_client`` installed and
``DJANGO_RL["METRICS"]`` on (the default):

* ``django_rl_decisions_total{policy, result}``: every decision once (the
  front doors' and ``Policy.hit``'s; a deny-cache answer too, as
  ``denied``). ``result`` is ``allowed``, ``denied``, ``shadow_denied`` (a
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
:class:`PendingLatencies`: a bisect and two adds), not for
prometheus_client's ``inc`` and ``observe`` (a label lookup, checks, and a
lock per value; a write to a memory-mapped file in multiprocess mode). The
pending counts reach the metrics at the next scrape of this process and
from a daemon thread once a second, so a scrape of another worker sees them
at most about a second late. ``make bench`` measures the cost.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections.abc import Iterable
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse

from django_rl.core.decision import Decision

prometheus_client: Any
try:
    import prometheus_client
except ImportError:  # the extra is not installed: nothing is counted
    prometheus_client = None

#: ``result`` labels of ``django_rl_decisions_total``.
RESULTS = ("allowed", "denied", "shadow_denied", "degraded_allowed", "degraded_denied")
#: The histogram's buckets, in seconds: a loopback round trip is 50-300 µs.
LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
)  # fmt: skip


#: How often the daemon thread moves pending latencies into the histogram, in seconds.
FLUSH_INTERVAL = 1.0


class PendingLatencies:
    """Latencies counted per bucket in this process, not yet in the histogram.

    One lock for the whole observation, where the histogram takes one per
    bucket it touches and one for its sum: the decision pays for a bisect
    and two adds; :meth:`flush` pays the histogram's price once per bucket.
    """

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self._lock = threading.Lock()
        self._counts = [0] * (len(bounds) + 1)  # the last: above every bound (+Inf)
        self._sum = 0.0

    def observe(self, seconds: float) -> None:
        index = bisect.bisect_left(self.bounds, seconds)
        with self._lock:
            self._counts[index] += 1
            self._sum += seconds

    def flush(self, histogram: Any) -> None:
        """Add what is pending to ``histogram`` (a ``prometheus_client.Histogram``)."""
        with self._lock:
            counts, total = self._counts, self._sum
            if not any(counts):
                return
            self._counts, self._sum = [0] * len(counts), 0.0
        buckets = getattr(histogram, "_buckets", None)
        if buckets is not None and len(buckets) == len(counts) and hasattr(histogram, "_sum"):
            # prometheus_client's own per-bucket values: one add per bucket.
            histogram._sum.inc(total)
            for bucket, count in zip(buckets, counts, strict=True):
                if count:
                    bucket.inc(count)
            return
        # Another layout: observe each at its bucket's mean (the sum stays exact).
        mean = total / sum(counts)
        for count in counts:
            for _ in range(count):
                histogram.observe(mean)


def result_of(decision: Decision) -> str:
    """Return the ``result`` label of ``decision``."""
    if decision.shadow and not decision.allowed:
        return "shadow_denied"
    if decision.degraded:
        return "degraded_allowed" if decision.allowed else "degraded_denied"
    return "allowed" if decision.allowed else "denied"


class Metrics:
    """The metrics of this process, made once; children by label cached for the hot path."""

    def __init__(self, client: Any) -> None:
        self.decisions = client.Counter(
            "django_rl_decisions_total",
            "Rate-limit decisions, by policy and result.",
            ["policy", "result"],
        )
        self.deny_cache = client.Counter(
            "django_rl_deny_cache_answers_total",
            "Denials answered by the process's deny cache, without Redis.",
            ["policy"],
        )
        self.redis_errors = client.Counter(
            "django_rl_redis_errors_total",
            "Calls Redis could not answer, by kind.",
            ["kind"],
        )
        self.redis_seconds = client.Histogram(
            "django_rl_redis_seconds",
            "The Redis round trip of a decision, in seconds.",
            buckets=LATENCY_BUCKETS,
        )
        self._children: dict[tuple[object, ...], Any] = {}
        self._lock = threading.Lock()
        self.pending = PendingLatencies(LATENCY_BUCKETS)
        #: Decisions by (policy, result) and deny-cache answers by policy, not
        #: yet in the counters: a dict increment under one lock per decision,
        #: where a counter's ``inc`` costs a label lookup, checks and a lock.
        self._counting = threading.Lock()
        self._decisions: dict[tuple[str, str], int] = {}
        self._answers: dict[str, int] = {}
        threading.Thread(target=self._flush_forever, name="django_rl-metrics", daemon=True).start()

    def count_decision(self, policy: str, result: str) -> None:
        key = (policy, result)
        with self._counting:
            self._decisions[key] = self._decisions.get(key, 0) + 1

    def count_answer(self, policy: str) -> None:
        with self._counting:
            self._answers[policy] = self._answers.get(policy, 0) + 1

    def flush(self) -> None:
        """Move this process's pending counts and latencies into the metrics."""
        with self._counting:
            decisions, self._decisions = self._decisions, {}
            answers, self._answers = self._answers, {}
        for (policy, result), n in decisions.items():
            self.child(self.decisions, policy, result).inc(n)
        for policy, n in answers.items():
            self.child(self.deny_cache, policy).inc(n)
        self.pending.flush(self.redis_seconds)

    def _flush_forever(self) -> None:
        while True:
            time.sleep(FLUSH_INTERVAL)
            self.flush()

    def child(self, metric: Any, *labels: str) -> Any:
        """Return ``metric.labels(*labels)``, cached (``labels`` locks and builds a tuple)."""
        key = (id(metric), *labels)
        found = self._children.get(key)
        if found is None:
            with self._lock:
                found = metric.labels(*labels)
                self._children[key] = found
        return found


_metrics: Metrics | None = None
_enabled: bool | None = None
_making = threading.Lock()


def metrics() -> Metrics | None:
    """Return this process's metrics, or ``None`` when they are off or cannot be made."""
    global _metrics, _enabled
    if _enabled is None:
        from django_rl.conf import get_settings

        _enabled = prometheus_client is not None and get_settings().metrics
    if not _enabled:
        return None
    if _metrics is None:
        with _making:
            if _metrics is None:
                _metrics = Metrics(prometheus_client)
    return _metrics


@receiver(setting_changed)
def _reread(*, setting: str, **kwargs: object) -> None:
    global _enabled
    if setting == "DJANGO_RL":
        _enabled = None


def count_decision(policy: str, decision: Decision) -> None:
    """Count one decision of ``policy`` (see the module)."""
    # metrics(), result_of and Metrics.count_decision, inline for the usual
    # case: this runs on every decision.
    found = _metrics if _enabled and _metrics is not None else metrics()
    if found is not None:
        allowed = decision.allowed and not decision.degraded
        key = (policy, "allowed" if allowed else result_of(decision))
        with found._counting:
            decisions = found._decisions
            decisions[key] = decisions.get(key, 0) + 1


def count_decisions(decided: Iterable[tuple[str, Decision]]) -> None:
    """Count each ``(policy, decision)`` as :func:`count_decision` does, under one lock.

    For the Decisions of one request of several policies.
    """
    found = _metrics if _enabled and _metrics is not None else metrics()
    if found is not None:
        keys = [
            (policy, "allowed" if d.allowed and not d.degraded else result_of(d))
            for policy, d in decided
        ]
        with found._counting:
            decisions = found._decisions
            for key in keys:
                decisions[key] = decisions.get(key, 0) + 1


def count_deny_cache_answer(policy: str) -> None:
    found = metrics()
    if found is not None:
        found.count_answer(policy)


def count_redis_error(kind: str) -> None:
    found = metrics()
    if found is not None:
        found.child(found.redis_errors, kind).inc()


def observe_redis_seconds(seconds: float) -> None:
    found = metrics()
    if found is not None:
        found.pending.observe(seconds)


def metrics_view(request: HttpRequest) -> HttpResponse:
    """Serve the metrics in Prometheus's text format (every worker's, in multiprocess mode).

    Route it where your scraper looks, and keep it from the public (a
    network rule, or your own authentication around it)::

        path("metrics/", metrics_view)

    Answers 404 when ``prometheus_client`` is not installed or ``METRICS`` is
    off.
    """
    found = metrics()
    if found is None or prometheus_client is None:
        return HttpResponse("metrics are off", status=404, content_type="text/plain")
    found.flush()
    registry: Any = prometheus_client.REGISTRY
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = prometheus_client.CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    body = prometheus_client.generate_latest(registry)
    return HttpResponse(body, content_type=prometheus_client.CONTENT_TYPE_LATEST)
