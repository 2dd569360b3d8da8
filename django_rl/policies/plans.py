"""Rates and the state each keeps: one variant per rate, and rates chosen per request.

A policy's ``rate`` is a rate string (``"5/m"``), or, for per-plan limits, a
function of the request: a callable, or the dotted path of one (a string with
a dot and no ``/``), ``rate_of(request) -> rate string | None``. ``None``
means the policy does not limit that request (no Redis call).

Every rate a policy uses is a :class:`Variant`: the algorithm at that rate,
and the fingerprint in its keys. The fingerprint changes with the rate, so
each rate keeps its own state: a user who moves from a free plan (100/h) to
a pro one (10000/h) starts a fresh counter instead of having 100 hits of
the old one read against the new limit.

**The rate catalogue.** Whoever reads a per-plan policy's state later (the
admin's live counters, ``reset``) needs the rate behind each fingerprint, and
may run in another process than the one that decided. So each process, the
first time it decides at a rate (and again once a day), records
``fingerprint -> rate`` in a hash ``{KEY_PREFIX}:~rates:{policy}``: one more
round trip, once per rate, process and day. Keys whose part after the prefix
starts with ``~`` are the app's own bookkeeping, never a policy's counters
(policy names cannot start with ``~``). The hash has a TTL longer than any
rate's period (400 days), refreshed by every write.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from asgiref.sync import iscoroutinefunction, sync_to_async

from django_rl.algorithms import ALGORITHMS, Algorithm, fingerprint_text
from django_rl.algorithms.windows import quota_window
from django_rl.core.dotted import import_callable
from django_rl.core.keys import fingerprint, key_parts

#: ``rate_of(request) -> rate string | None``.
RateFunction = Callable[[Any], object]

#: Distinct rates a per-plan policy keeps variants of, per process. Beyond
#: them a rate is built for each request and not recorded in the catalogue
#: (logged once): rates are meant to be a few plans, not one per client.
MAX_VARIANTS = 100
#: The catalogue's TTL: longer than any rate's period (366 days at most).
CATALOGUE_TTL_MS = 400 * 86_400_000
#: How often a process records a rate it keeps deciding at again.
CATALOGUE_REFRESH_S = 86_400.0
#: How long a process waits before trying again after a failed record.
CATALOGUE_RETRY_S = 10.0
#: What a policy's other parameters are judged with when its rate is a function.
SAMPLE_RATE = "1/s"

logger = logging.getLogger("django_rl")


class RateSpecError(ValueError):
    """A rate function that cannot be used; the message says why."""


def is_rate_function(value: object) -> bool:
    """Return whether ``value`` names a rate function rather than being a rate string.

    A callable, or a dotted path: a string with a ``.`` and no ``/`` (every
    rate string has a ``/``).
    """
    if isinstance(value, str):
        return "/" not in value and "." in value
    return callable(value)


def function_label(value: object) -> str:
    """Return how messages, the admin and fingerprints name a rate or key function."""
    if isinstance(value, str):
        return value
    module = getattr(value, "__module__", None) or "?"
    return f"{module}.{getattr(value, '__qualname__', type(value).__qualname__)}"


def resolve_rate_function(value: object) -> RateFunction:
    """Return the callable ``value`` is or names.

    :raises RateSpecError: if a dotted path does not import or is not callable.
    """
    if not isinstance(value, str):
        if not callable(value):
            raise RateSpecError(f"rate {value!r} is neither a rate string nor a callable")
        return value
    return import_callable(value, f"rate function {value!r}", RateSpecError)


def catalogue_key(prefix: str, policy: str) -> str:
    """Return the key of the hash that maps a per-plan policy's fingerprints to rates."""
    return f"{prefix}:~rates:{policy}"


@dataclass(frozen=True, eq=False)
class Variant:
    """One rate of a policy: the algorithm at that rate, and where its state lives.

    :ivar rate: the rate as the policy (or its rate function) gave it.
    :ivar window: seconds the rate takes to grant its whole limit (headers' ``w``).
    """

    algorithm: Algorithm
    rate: str
    fingerprint: str
    limit: int
    window: int | None
    key_head: str
    key_tail: str


def make_variant(algorithm: Algorithm, rate: str, *, prefix: str, name: str, extra: str) -> Variant:
    """Return the variant of ``algorithm``; ``extra`` joins its fingerprint (an inline key)."""
    text = fingerprint_text(algorithm) + (f" key {extra}" if extra else "")
    mark = fingerprint(text)
    head, tail = key_parts(prefix, name, mark)
    return Variant(algorithm, rate, mark, algorithm.limit, quota_window(algorithm), head, tail)


def algorithm_at(spec: Mapping[str, Any], rate: object) -> Algorithm:
    """Return the algorithm ``spec`` names, at ``rate``; raise RateError or ParameterError."""
    return ALGORITHMS[spec["algorithm"]].from_spec({**spec, "rate": rate})


#: The request attribute that keeps the rate functions' answers asked on the loop.
ASKED_RATES = "_django_rl_rates"


class PlanRates:
    """The rates of a per-plan policy: its rate function, and a variant per rate seen.

    Thread-safe: two threads meeting a new rate at once may both build its
    variant; they are equal, and one is kept.
    """

    def __init__(self, function: RateFunction, label: str, build: Callable[[str], Variant]) -> None:
        self.function = function
        self.label = label
        self._build = build
        self._variants: dict[str, Variant] = {}
        #: rate -> monotonic time after which its catalogue entry is due.
        self._due: dict[str, float] = {}
        self._lock = threading.Lock()
        self._warned = False

    def rate_for(self, request: Any) -> object:
        """Return what the rate function says for ``request`` (a rate string or None, if sane).

        An async front door asked it before the decision (:meth:`arate_for`):
        that answer, kept on the request.
        """
        asked = getattr(request, ASKED_RATES, None)
        if asked is not None and self.function in asked:
            return asked[self.function]
        return self.function(request)

    async def arate_for(self, request: Any) -> None:
        """Ask the rate function for ``request`` on the event loop, for :meth:`rate_for`.

        An ``async def`` rate function is awaited; a sync one runs in
        ``sync_to_async`` (thread-sensitive). The answer is kept on the request.
        """
        function = self.function
        if iscoroutinefunction(function):
            rate = await function(request)
        else:
            rate = await sync_to_async(function, thread_sensitive=True)(request)
        asked = getattr(request, ASKED_RATES, None)
        if asked is None:
            asked = {}
            setattr(request, ASKED_RATES, asked)
        asked[function] = rate

    def variant(self, rate: str) -> Variant:
        """Return the variant of ``rate``, built once per process.

        :raises RateError, ParameterError: if ``rate`` does not make a valid policy.
        """
        found = self._variants.get(rate)
        if found is not None:
            return found
        built = self._build(rate)
        with self._lock:
            if len(self._variants) < MAX_VARIANTS:
                return self._variants.setdefault(rate, built)
        if not self._warned:
            self._warned = True
            logger.error(
                "Rate function %s returned more than %d distinct rates; the others are not "
                "kept, and the admin and reset() do not see their state. Return a few "
                "plans' rates, not one per client.",
                self.label,
                MAX_VARIANTS,
            )
        return built

    def adapt(self, change: Callable[[Variant], Variant]) -> None:
        """Make every variant, built and to come, ``change(variant)`` (``Policy.read_blocks``)."""
        build = self._build
        self._build = lambda rate: change(build(rate))
        with self._lock:
            self._variants = {rate: change(each) for rate, each in self._variants.items()}

    def known(self) -> list[Variant]:
        """Return the variants this process has built."""
        return list(self._variants.values())

    def due(self, variant: Variant) -> bool:
        """Return whether ``variant``'s catalogue entry should be written now."""
        return self._variants.get(variant.rate) is variant and time.monotonic() >= self._due.get(
            variant.rate, 0.0
        )

    def recorded(self, variant: Variant, ok: bool) -> None:
        """Note that writing ``variant``'s catalogue entry worked (or failed: retry soon)."""
        wait = CATALOGUE_REFRESH_S if ok else CATALOGUE_RETRY_S
        self._due[variant.rate] = time.monotonic() + wait
