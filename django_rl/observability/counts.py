"""The counting behind ``metrics.py``: per-process pending counts, the metrics, their collector.

:class:`Metrics` holds the four metrics of ``metrics.py``'s docstring and
what this process counted and has not yet put in them; :class:`Collector`
is how ``prometheus_client``'s default registry reads them (flushing first).
``metrics.py`` makes one per process and keeps it across forks.
"""

from __future__ import annotations

import bisect
import threading
import time
from typing import Any

from django_rl.core.decision import Decision
from django_rl.observability._speedups import Adder, histogram_adder

#: ``result`` labels of ``django_rl_decisions_total``.
RESULTS = ("allowed", "denied", "shadow_denied", "degraded_allowed", "degraded_denied")
#: The histogram's buckets, in seconds: a loopback round trip is 50-300 µs.
LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
)  # fmt: skip


#: How often each process's daemon thread moves what is pending into the metrics, in seconds.
FLUSH_INTERVAL = 1.0


class PendingLatencies:
    """Latencies counted per bucket in this process, not yet in the histogram.

    One lock for the whole observation, where the histogram takes one per
    bucket it touches and one for its sum: the decision pays for a bisect
    and two adds; :meth:`flush` pays the histogram's price once per bucket
    (``_speedups.histogram_adder``).
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

    def flush(self, add: Adder) -> None:
        """Hand what is pending to ``add`` (``_speedups.histogram_adder``'s), and start afresh."""
        with self._lock:
            counts, total = self._counts, self._sum
            if not any(counts):
                return
            self._counts, self._sum = [0] * len(counts), 0.0
        add(counts, total)


def result_of(decision: Decision) -> str:
    """Return the ``result`` label of ``decision``."""
    if decision.shadow and not decision.allowed:
        return "shadow_denied"
    if decision.degraded:
        return "degraded_allowed" if decision.allowed else "degraded_denied"
    return "allowed" if decision.allowed else "denied"


#: How long a fork waits for a flush or collection under way to end
#: (``Metrics.before_fork``), in seconds: a flush takes microseconds.
FORK_WAIT = 1.0


class Metrics:
    """The metrics of this process, made once; children by label cached for the flushes.

    The metrics are in no registry of their own: :class:`Collector`, in
    ``prometheus_client``'s default registry, collects them after a flush
    of what is pending, so any collection sees every decision made before
    it, whatever the order of the registry's collectors.

    Locks: ``counting`` guards the pending counts (held for a dict add);
    ``_flushing`` is held by every flush and collection, so this process
    touches the prometheus_client metrics (and their locks) only under it,
    and a fork waits for it (:meth:`before_fork`): a child never inherits
    one of those locks held. A child gets new locks and no pending counts
    (:meth:`after_fork_in_child`); its flush thread starts with its first
    count (:func:`metrics`).
    """

    def __init__(self, client: Any) -> None:
        self.decisions = client.Counter(
            "django_rl_decisions_total",
            "Rate-limit decisions, by policy and result.",
            ["policy", "result"],
            registry=None,
        )
        self.deny_cache = client.Counter(
            "django_rl_deny_cache_answers_total",
            "Denials answered by the process's deny cache, without Redis.",
            ["policy"],
            registry=None,
        )
        self.redis_errors = client.Counter(
            "django_rl_redis_errors_total",
            "Calls Redis could not answer, by kind.",
            ["kind"],
            registry=None,
        )
        self.redis_seconds = client.Histogram(
            "django_rl_redis_seconds",
            "The Redis round trip of a decision, in seconds.",
            buckets=LATENCY_BUCKETS,
            registry=None,
        )
        self._add_latencies = histogram_adder(self.redis_seconds, LATENCY_BUCKETS)
        self._children: dict[tuple[object, ...], Any] = {}
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._held_over_fork = False
        #: Whether this process's flush thread runs (False again in a child).
        self.running = False
        self._fresh()
        _register(client.REGISTRY, Collector(self))

    def _fresh(self) -> None:
        """Start with nothing pending, under a new lock (made, and in a forked child)."""
        self.pending = PendingLatencies(LATENCY_BUCKETS)
        #: Decisions by (policy, result), deny-cache answers by policy and
        #: Redis errors by kind, not yet in the counters: a dict increment
        #: under one lock, where a counter's ``inc`` costs a label lookup,
        #: checks and a lock. ``counting`` and ``pending_decisions`` are
        #: public: ``metrics.py``'s per-decision functions add to them
        #: directly (a method call more would cost each decision a frame).
        self.counting = threading.Lock()
        self.pending_decisions: dict[tuple[str, str], int] = {}
        self._answers: dict[str, int] = {}
        self._errors: dict[str, int] = {}

    def start(self) -> None:
        """Start this process's flush thread, unless it runs (callers hold ``_making``)."""
        if not self.running:
            self.running = True
            threading.Thread(
                target=self._flush_forever, name="django_rl-metrics", daemon=True
            ).start()

    def count_decision(self, policy: str, result: str) -> None:
        key = (policy, result)
        with self.counting:
            self.pending_decisions[key] = self.pending_decisions.get(key, 0) + 1

    def count_answer(self, policy: str) -> None:
        with self.counting:
            self._answers[policy] = self._answers.get(policy, 0) + 1

    def count_error(self, kind: str) -> None:
        with self.counting:
            self._errors[kind] = self._errors.get(kind, 0) + 1

    def flush(self) -> None:
        """Move this process's pending counts and latencies into the metrics."""
        with self._flushing:
            self._flush()

    def collect(self) -> list[Any]:
        """Return the metrics' families (``prometheus_client``'s ``collect``), flushed first."""
        with self._flushing:
            self._flush()
            return [
                *self.decisions.collect(),
                *self.deny_cache.collect(),
                *self.redis_errors.collect(),
                *self.redis_seconds.collect(),
            ]

    def describe(self) -> list[Any]:
        return [
            *self.decisions.describe(),
            *self.deny_cache.describe(),
            *self.redis_errors.describe(),
            *self.redis_seconds.describe(),
        ]

    def _flush(self) -> None:
        """:meth:`flush`, ``_flushing`` held."""
        with self.counting:
            decisions, self.pending_decisions = self.pending_decisions, {}
            answers, self._answers = self._answers, {}
            errors, self._errors = self._errors, {}
        for (policy, result), n in decisions.items():
            self.child(self.decisions, policy, result).inc(n)
        for policy, n in answers.items():
            self.child(self.deny_cache, policy).inc(n)
        for kind, n in errors.items():
            self.child(self.redis_errors, kind).inc(n)
        self.pending.flush(self._add_latencies)

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

    def before_fork(self) -> None:
        """Hold ``_flushing`` over a fork (``os.register_at_fork``'s ``before``).

        So no flush or collection is under way in the fork, and the child
        never inherits a lock of the prometheus_client metrics held. Waits
        at most :data:`FORK_WAIT` (a flush takes microseconds): a lock that
        stays held (by the forking thread itself, or a stuck one) is let be,
        and the child makes its own anyway.
        """
        self._held_over_fork = self._flushing.acquire(timeout=FORK_WAIT)

    def after_fork_in_parent(self) -> None:
        if self._held_over_fork:
            self._held_over_fork = False
            self._flushing.release()

    def after_fork_in_child(self) -> None:
        """New locks, nothing pending (the parent counts its own), no flush thread yet."""
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._held_over_fork = False
        self.running = False
        self._fresh()


class Collector:
    """The registry's collector of :class:`Metrics`: every collection flushes first.

    Whoever collects (:func:`metrics_view`, django-prometheus's view,
    prometheus_client's ``make_wsgi_app``, ``start_http_server``, a push to a
    gateway, ``REGISTRY.get_sample_value``) sees every decision this process
    made before the collection began.
    """

    def __init__(self, measured: Metrics) -> None:
        self.metrics = measured

    def collect(self) -> list[Any]:
        return self.metrics.collect()

    def describe(self) -> list[Any]:
        return self.metrics.describe()


#: The :class:`Collector` this module registered last, and the registry it is in.
_registered: tuple[Any, Collector] | None = None


def _register(registry: Any, collector: Collector) -> None:
    """Register ``collector`` in ``registry``, in place of the :class:`Collector` registered before.

    prometheus_client refuses two collectors of the same names. The one
    this module registered before (``metrics.py`` reloaded, as a test that
    hides prometheus_client does, makes new metrics) is replaced, so
    counting goes on; a conflict with anything else raises.
    """
    global _registered
    try:
        registry.register(collector)
    except ValueError:
        if _registered is None or _registered[0] is not registry:
            raise
        registry.unregister(_registered[1])
        registry.register(collector)
    _registered = (registry, collector)
