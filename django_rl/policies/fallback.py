"""The outage fallback: a count per identity and period, in this process, while Redis cannot answer.

A policy with ``fallback_rate`` (a rate string) decides here, instead of by
``fail_open``, each hit Redis could not answer: an outage (no answer) or an
error reply of a live server (OOM, NOPERM, ...). The fallback is a plain
count per period at ``fallback_rate``, whatever the policy's algorithm
(``capacity`` does not apply), per identity, in this process only:

* **Windows** are aligned on this host's clock (``floor(now / period)``), read
  from a monotonic clock anchored to the wall clock when the module was
  imported: a step of the wall clock never reopens a window. Every process
  of a host therefore has the same windows.
* **Exact per process**: one lock per process; however many threads decide
  at once, a window never admits more than the fallback limit per identity.
* **Bounded memory, per policy**: at most ``FALLBACK_MAX_IDENTITIES``
  identities for each policy; a new one evicts that policy's identity whose
  last hit is the oldest. An evicted identity starts again from zero, so the
  bound should be above the distinct identities a process sees in one
  period. Each policy has a table of its own, so identities a client mints
  under one policy (``header:X-Api-Key``) never evict another policy's
  counts (its ``login`` address): memory is at most
  ``FALLBACK_MAX_IDENTITIES`` times the policies with a ``fallback_rate``.
* **Nothing is written back**: local counts stay here, and Redis's stay in
  Redis. Around a switch a client can get the fallback allowance on top of
  what Redis had counted (see docs/reliability.md).

Decisions made here have ``degraded=True`` and ``fallback=True``; ``limit``,
``remaining`` and the times are the fallback's, so a denial answers 429 with
the local Retry-After and the headers describe the fallback limit.

:class:`FallbackStore` also notes *when* this process decides locally: an
episode starts with the first local decision and ends with the first
decision of a fallback policy Redis answers again (the admin's live counters
show it).
"""

from __future__ import annotations

import functools
import math
import os
import re
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django_rl.algorithms.periods import Calendar
from django_rl.algorithms.quota import calendar_of
from django_rl.algorithms.windows import NOMINAL_SECONDS
from django_rl.backends.clock import app_ms
from django_rl.conf import forget_on_change, get_settings
from django_rl.core.decision import Decision
from django_rl.core.keys import safe_identity
from django_rl.core.rates import Rate, RateError, parse_rate
from django_rl.core.reprs import short_repr

#: A quota policy's ``fallback_rate`` that names a calendar period (``"500/month"``,
#: which no plain rate can say): counted per such period of the quota's time zone.
CALENDAR_RATE = re.compile(r"\s*([0-9]{1,10})\s*/\s*(day|week|month|year)s?\s*")

#: Why a fallback_rate of 0 hits is refused (``validation.py`` says it too).
ZERO_FALLBACK = (
    "fallback_rate {rate} would deny every request while Redis cannot answer: "
    "that is fail_open False"
)

#: Bits of a packed state that hold the count (counts are at most 10**9 < 2**30).
_COUNT_BITS = 32
_COUNT_MASK = (1 << _COUNT_BITS) - 1

_ANCHOR_WALL_MS = time.time() * 1000
_ANCHOR_MONOTONIC = time.monotonic()


def now_ms() -> int:
    """Return this host's time in ms: the wall clock at import, moved on by the monotonic clock.

    Windows are aligned on it; it never goes back, whatever is done to the
    wall clock.
    """
    return int(_ANCHOR_WALL_MS + (time.monotonic() - _ANCHOR_MONOTONIC) * 1000)


@dataclass(frozen=True)
class Episode:
    """A stretch of time in which this process made local decisions.

    :ivar since: wall-clock time (seconds, the store's clock) of its first local decision.
    :ivar until: of the Redis-backed decision that ended it; ``None`` while
        it goes on.
    :ivar last: of its latest local decision.
    :ivar decisions: local decisions made in it.
    :ivar policies: the policies that decided locally in it, sorted.
    """

    since: float
    until: float | None
    last: float
    decisions: int
    policies: tuple[str, ...]


@dataclass(frozen=True)
class FallbackStatus:
    """What :meth:`FallbackStore.status` reports: the episode under way, the last one, the state.

    :ivar identities: identities held, all policies together.
    :ivar max_identities: the most held for each policy (``FALLBACK_MAX_IDENTITIES``).
    :ivar evicted: identities evicted to make room, all policies together.
    :ivar policies: how many policies hold identities.
    """

    current: Episode | None
    previous: Episode | None
    identities: int
    max_identities: int
    evicted: int
    policies: int = 0


class FallbackStore:
    """This process's local counts, by policy and identity; at most ``max_identities`` per policy.

    Thread-safe: every count is read and written under one lock, so threads
    never admit more than the limit between them. Each policy has its own
    table (least recently hit first), so one policy's identities never evict
    another's; each entry is one packed integer (window number and count)
    under a string key. See docs/reliability.md for the bytes per identity.

    :param max_identities: the most identities counted for each policy (at least 1).
    :param clock: time in ms (injected by tests); windows are aligned on it.
    """

    def __init__(self, max_identities: int, clock: Callable[[], int] = now_ms) -> None:
        if max_identities < 1:
            raise ValueError(f"max_identities must be at least 1, not {max_identities}")
        self.max_identities = max_identities
        self.clock = clock
        #: The counts, by policy name: each table at most ``max_identities``.
        self._tables: dict[str, OrderedDict[str, int]] = {}
        self._lock = threading.Lock()
        #: Identities evicted to make room, since the store was made.
        self.evicted = 0
        # The episode under way: [since, last, decisions], and its policies.
        self._episode: list[float] | None = None
        self._policies: set[str] = set()
        self._previous: Episode | None = None
        #: Whether an episode of local decisions is under way: a plain
        #: attribute, read without the lock by every Redis-backed decision of
        #: a fallback policy (a stale read only delays the episode's end).
        self.deciding = False
        _stores.add(self)

    def __len__(self) -> int:
        """Return the identities held, all policies together."""
        with self._lock:
            return sum(map(len, self._tables.values()))

    def held(self, policy: str) -> int:
        """Return the identities held for ``policy``."""
        with self._lock:
            table = self._tables.get(policy)
            return 0 if table is None else len(table)

    def hit(
        self,
        policy: str,
        key: str,
        limit: int,
        period_ms: int,
        cost: int,
        window_of: Callable[[int], int] | None = None,
    ) -> tuple[bool, int, int]:
        """Count a hit of ``cost`` on ``policy``'s ``key`` if it fits: ``(allowed, count, now)``.

        ``count`` is the window's count after the hit (with it, if allowed);
        ``now`` the clock's time in ms when it was decided. ``window_of(now)``
        numbers the windows instead of the period (a quota's calendar periods).
        """
        with self._lock:
            now = self.clock()
            window = now // period_ms if window_of is None else window_of(now)
            counts = self._tables.get(policy)
            if counts is None:
                counts = self._tables[policy] = OrderedDict()
            state = counts.get(key)
            count = 0
            if state is not None and state >> _COUNT_BITS == window:
                count = state & _COUNT_MASK
            allowed = count + cost <= limit
            if allowed:
                count += cost
            if state is None:
                # Only this policy's identities make room: another policy's
                # identities (minted by a client) cannot push this one's out.
                while len(counts) >= self.max_identities:
                    counts.popitem(last=False)
                    self.evicted += 1
            else:
                counts.move_to_end(key)  # the identity hit longest ago is evicted first
            counts[key] = (window << _COUNT_BITS) | count
            self._note_local_decision(policy, now)
        return allowed, count, now

    def read(
        self,
        policy: str,
        key: str,
        period_ms: int,
        window_of: Callable[[int], int] | None = None,
    ) -> tuple[int, int]:
        """Return ``(count, now)`` of ``policy``'s ``key`` in the window now, changing nothing."""
        with self._lock:
            now = self.clock()
            counts = self._tables.get(policy)
            state = None if counts is None else counts.get(key)
        window = now // period_ms if window_of is None else window_of(now)
        if state is None or state >> _COUNT_BITS != window:
            return 0, now
        return state & _COUNT_MASK, now

    def forget(self, policy: str, key: str) -> None:
        """Drop the count of ``policy``'s ``key``, if any (``Policy.reset`` calls this)."""
        with self._lock:
            counts = self._tables.get(policy)
            if counts is not None:
                counts.pop(key, None)

    def clear(self) -> None:
        """Drop every count, the episodes and the eviction count."""
        with self._lock:
            self._tables.clear()
            self.evicted = 0
            self._episode = None
            self.deciding = False
            self._policies = set()
            self._previous = None

    def redis_answered(self) -> None:
        """End the episode under way: a decision of a fallback policy was made by Redis."""
        with self._lock:
            episode = self._episode
            if episode is None:
                return
            since, last, decisions = episode
            self._previous = Episode(
                since, self.clock() / 1000, last, int(decisions), tuple(sorted(self._policies))
            )
            self._episode = None
            self.deciding = False
            self._policies = set()

    def status(self) -> FallbackStatus:
        """Return the episode under way (if any), the one before it, and how full the store is."""
        with self._lock:
            current = None
            if self._episode is not None:
                since, last, decisions = self._episode
                current = Episode(since, None, last, int(decisions), tuple(sorted(self._policies)))
            held = [len(table) for table in self._tables.values()]
            return FallbackStatus(
                current,
                self._previous,
                sum(held),
                self.max_identities,
                self.evicted,
                sum(1 for n in held if n),
            )

    def _note_local_decision(self, policy: str, now: int) -> None:
        # Under the lock. Seconds on the store's clock: wall-clock time, but
        # without a second clock read per decision.
        seconds = now / 1000
        episode = self._episode
        if episode is None:
            self._episode = [seconds, seconds, 1]
            self.deciding = True
        else:
            episode[1] = seconds
            episode[2] += 1
        self._policies.add(policy)


class LocalFallback:
    """One policy's fallback: its rate, and its counts in the process's store.

    :param policy: the policy's name.
    :param rate: the ``fallback_rate`` (a rate string).
    :param calendar: a quota policy's calendar, when ``rate`` names one of its
        periods (``"500/month"``): the count is kept per calendar period of it.
    :raises RateError: if ``rate`` does not parse.
    """

    def __init__(
        self, policy: str, rate: str, store: FallbackStore, calendar: Calendar | None = None
    ) -> None:
        parsed = parse_rate(rate) if calendar is None else calendar_rate(rate)
        if parsed.limit == 0:
            raise RateError(ZERO_FALLBACK.format(rate=short_repr(rate)))
        self.policy = policy
        self.rate = rate
        self.limit = parsed.limit
        self.period_ms = parsed.period_ms
        #: ``w`` of the headers: the seconds the fallback takes to grant its limit.
        self.window = max(1, math.ceil(parsed.period_ms / 1000))
        self.store = store
        # The rate is in the key, so a policy whose fallback_rate changed does
        # not read the counts of the old one. (The policy's name is not: it
        # names the table.)
        self._head = f"{parsed} "
        self.calendar = calendar
        self._window_of: Callable[[int], int] | None = None
        if calendar is not None:
            self._head = f"{rate} {calendar.zone.key} "
            self.window = NOMINAL_SECONDS[calendar.period]
            self._window_of = functools.partial(_period_number, calendar)

    def __repr__(self) -> str:
        return f"<LocalFallback {self.policy!r} at {self.rate}>"

    def key(self, identity: str) -> str:
        """Return the key of ``identity`` in the policy's table (made safe: bounded length)."""
        return self._head + safe_identity(identity)

    def hit(self, identity: str, cost: int = 1) -> Decision:
        """Count a hit of ``cost`` for ``identity`` in this process and decide.

        A hit heavier than the fallback limit is always denied, until the end
        of the window (it could never fit).
        """
        allowed, count, now = self.store.hit(
            self.policy, self.key(identity), self.limit, self.period_ms, cost, self._window_of
        )
        return self._decision(allowed, count, now)

    def peek(self, identity: str) -> Decision:
        """Return what a hit of cost 1 would be told now, counting nothing."""
        count, now = self.store.read(
            self.policy, self.key(identity), self.period_ms, self._window_of
        )
        return self._decision(count < self.limit, count, now)

    def forget(self, identity: str) -> None:
        """Drop ``identity``'s local count."""
        self.store.forget(self.policy, self.key(identity))

    def _decision(self, allowed: bool, count: int, now: int) -> Decision:
        # The window ends at the next multiple of the period (a quota's: its period's end).
        window = self.window
        if self.calendar is None:
            left_ms = self.period_ms - now % self.period_ms
        else:
            span = self.calendar.span(now)
            left_ms, window = span.end - now, span.seconds
        return Decision(
            allowed,
            self.limit,
            self.limit - count,
            0.0 if allowed else left_ms / 1000,
            left_ms / 1000 if count else 0.0,
            self.policy,
            True,
            window,
            True,
        )


def calendar_rate(rate: str) -> Rate:
    """Return a quota's calendar ``fallback_rate`` (``"500/month"``) as a Rate of its count
    and nominal period (its windows are the calendar's).

    :raises RateError: if it is not ``"<count>/<day|week|month|year>"``.
    """
    found = CALENDAR_RATE.fullmatch(rate)
    if found is None:
        raise RateError(f"{short_repr(rate)} is not '<count>/<day|week|month|year>'")
    return Rate(int(found[1]), NOMINAL_SECONDS[found[2]] * 1000)


def fallback_calendar(spec: Mapping[str, Any]) -> Calendar | None:
    """Return the calendar a quota policy's ``fallback_rate`` counts in, if it names a
    calendar period (``"500/month"``); ``None`` for any other (a plain rate)."""
    rate = spec.get("fallback_rate")
    if spec.get("algorithm") != "quota" or not isinstance(rate, str):
        return None
    found = CALENDAR_RATE.fullmatch(rate)
    return None if found is None else calendar_of(spec, found[2])


def _period_number(calendar: Calendar, now: int) -> int:
    """Number a quota's calendar periods: the start of the one holding ``now``, in s."""
    return calendar.span(now).start // 1000


_stores: weakref.WeakSet[FallbackStore] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # A forked worker is a process of its own: its own allowance, and a lock
    # no thread of the parent may be holding.
    for store in list(_stores):
        store._lock = threading.Lock()
        store.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


@functools.cache
def get_fallback_store() -> FallbackStore:
    """Return this process's store of local counts (``FALLBACK_MAX_IDENTITIES`` per policy at most).

    Built on first use and rebuilt (empty) when the settings change.
    """
    settings = get_settings()
    # CLOCK "app": windows on the decisions' own clock (time.time_ns), which tests move.
    clock = app_ms if settings.clock == "app" else now_ms
    return FallbackStore(settings.fallback_max_identities, clock)


forget_on_change(get_fallback_store.cache_clear)
