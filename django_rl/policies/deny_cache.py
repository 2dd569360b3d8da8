"""The local deny cache: a flood from a denied client costs no Redis round trip.

When Redis answers "denied, retry after R" for a (policy, identity), this
process remembers it and answers the same hits itself, without Redis, until R
has passed or ``DENY_CACHE_MAX_AGE`` seconds have, whichever comes first. Only
denials are remembered, and only those whose answer stays exactly true until
then, so no hit Redis would allow is ever denied here:

* ``fixed_window``: any denial, for hits of any cost. The window's counter
  only grows until the window ends, so until then every hit is denied, with
  ``remaining == 0`` and the window's end as Retry-After.
* ``sliding_log`` and ``token_bucket``: denials of cost 1, for hits of cost 1.
  Until R no entry leaves the log and no whole token comes back, so no hit of
  cost 1 can pass and ``remaining`` stays 0. A denial of cost 5 says nothing
  about cost 1 (it may fit), and after a denial of cost 1 a hit of cost 5
  would be told too short a Retry-After, so both go to Redis.

Only removing the state can make such a hit pass before R. ``Policy.reset``
forgets the entry in this process, and writes a new reset token that every
other process reads before trusting its entries (``reset_epoch.py``): a
process answers from its cache only while its last read of the token is
less than ``reset_epoch.CHECK_INTERVAL`` (1 s) old, and drops the entries
remembered before a read that finds another token. So a reset anywhere, or
a flush of the database (which removes the token), is honoured by every
process within 1 s, at the cost of at most one read a second per process
that answers denials (none in a process that answers none). Keys deleted
by hand (not by a flush) are seen when the entry ends, at most
min(R, ``DENY_CACHE_MAX_AGE``) later.

The entry ends before Redis would allow the hit: R is counted from when the
request was sent (before the server read its clock), less 1 ms for the
server's rounding to milliseconds and 0.1% for the rate at which this host's
monotonic clock and the server's clock may drift apart (NTP slews a clock by
at most 0.05%). A hit in that last sliver goes to Redis, which decides.

``peek`` neither reads nor fills the cache: it always asks Redis. Decisions
made while Redis is down (``degraded``) are never remembered.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Awaitable, Callable

from django_rl.backends.clock import app_seconds
from django_rl.conf import forget_on_change, get_settings
from django_rl.core.decision import Decision
from django_rl.policies import reset_epoch

#: How far apart the rates of this host's monotonic clock and the Redis
#: server's clock may be, as a fraction (twice NTP's largest slew).
CLOCK_RATE_MARGIN = 0.001
#: Redis computes times in whole milliseconds.
ROUNDING_MARGIN = 0.001
#: What the float arithmetic of times may be off by, in ms, before rounding up.
FLOAT_SLACK_MS = 1e-6
#: No reset token read yet (or the last read failed).
_UNREAD = object()


class _Denial:
    """One remembered denial (times on the cache's clock, in seconds)."""

    __slots__ = (
        "any_cost",
        "asked_at",
        "last",
        "limit",
        "policy",
        "reset_at",
        "retry_at",
        "until",
        "window",
    )

    def __init__(
        self,
        asked_at: float,
        until: float,
        retry_at: float,
        reset_at: float,
        any_cost: bool,
        limit: int,
        policy: str,
        window: int | None = None,
    ) -> None:
        self.asked_at = asked_at  # when the hit Redis denied was sent
        self.until = until  # answer locally while the clock reads less than this
        self.retry_at = retry_at
        self.reset_at = reset_at
        self.any_cost = any_cost
        self.limit = limit
        self.policy = policy
        self.window = window  # the Decision's, for the headers' w
        # The last answer given, reused while Retry-After in ms is the same:
        # a flood asks many times a millisecond, and a Decision costs more
        # to build than the rest of a local answer.
        self.last: tuple[int, Decision] | None = None  # (Retry-After in ms, answer)


class DenyCache:
    """Denials this process remembers, by Redis key; at most ``max_entries`` of them.

    When full, remembering a new denial drops the entry remembered longest
    ago. An entry that has ended is dropped when a lookup meets it.
    Thread-safe: lookups read a dict without a lock; changes take one.

    :param max_entries: the most entries kept (at least 1).
    :param max_age: the longest an entry is used, in seconds, whatever the
        Retry-After: this bounds how long other processes keep denying after
        a reset.
    :param clock: a clock in seconds: monotonic, or with ``CLOCK: "app"`` the
        decisions' own (``backends.clock.app_seconds``); one that goes back
        ends the entries made after the time it went back to.
    :param read_token: ``read_token(fresh)`` returns the reset token now in
        force, writing ``fresh`` if there is none, or raises (see
        ``reset_epoch.read_token``); ``None``: entries are trusted until they
        end (no reset in another process is seen). The first denial this
        cache is told of is not remembered: the token is read then, as the
        baseline of later reads.
    :param check_interval: the longest, in seconds, entries are trusted
        after the token was last read (from before the read was sent).
    """

    def __init__(
        self,
        max_entries: int,
        max_age: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        read_token: Callable[[str], object] | None = None,
        check_interval: float = 1.0,
    ) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, not {max_entries}")
        self.max_entries = max_entries
        self.max_age = max_age
        self.clock = clock
        self._entries: dict[str, _Denial] = {}
        #: ``holds(key)``: whether a denial of ``key`` is remembered (true or
        #: not, :meth:`lookup` decides). The dict's own ``get``, no Python
        #: frame: every decision asks first, and nearly every answer is no.
        #: (The dict is only ever changed in place, never replaced.)
        self.holds = self._entries.get
        self._lock = threading.Lock()
        self.read_token = read_token
        self.check_interval = check_interval
        #: The token last read (``_UNREAD``: none yet, or the read failed).
        self._token: object = _UNREAD
        #: When the read that found ``_token`` was sent; entries are trusted
        #: until ``check_interval`` after it.
        self._confirmed_at = -math.inf
        #: When the last read that dropped entries was sent: a denial asked
        #: of Redis before then may predate the reset, and is not remembered.
        self._cleared_at = -math.inf
        self._checking = threading.Lock()
        #: Reads of the token so far (the bench and tests count them).
        self.token_reads = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def lookup(self, key: str, cost: int) -> Decision | None:
        """Return the denial remembered for a hit of ``cost`` on ``key``, or ``None``.

        ``None`` means: ask Redis.
        """
        entry = self._entries.get(key)
        if entry is None:
            return None
        now = self.clock()
        if not entry.asked_at <= now < entry.until:
            # Ended; or the clock went back (CLOCK "app": a test moved
            # time.time_ns back), and this entry is about a time to come.
            self._drop(key, entry)
            return None
        if cost != 1 and not entry.any_cost:
            return None
        if not 0 <= now - self._confirmed_at < self.check_interval and not self._confirm():
            return None
        # Whole milliseconds, rounded up, as Redis's own answers are (less a
        # float's error: a clock that stands still, CLOCK "app" under a test's
        # frozen time, reads exactly the Retry-After Redis gave).
        retry_ms = math.ceil((entry.retry_at - now) * 1000 - FLOAT_SLACK_MS)
        last = entry.last
        if last is not None and last[0] == retry_ms:
            return last[1]
        decision = Decision(
            allowed=False,
            limit=entry.limit,
            remaining=0,
            retry_after=retry_ms / 1000,
            reset_after=math.ceil((entry.reset_at - now) * 1000 - FLOAT_SLACK_MS) / 1000,
            policy=entry.policy,
            window=entry.window,
        )
        entry.last = (retry_ms, decision)  # one assignment: threads see both or neither
        return decision

    def remember(
        self, key: str, decision: Decision, cost: int, asked_at: float, *, any_cost: bool
    ) -> None:
        """Remember Redis's answer to a hit of ``cost`` sent at ``asked_at``, if it is a denial.

        :param asked_at: this cache's ``clock()`` just before the request was sent.
        :param any_cost: the denial holds for hits of every cost until its
            Retry-After (``fixed_window``); else only for cost 1, and only a
            denial of cost 1 is remembered.
        """
        if decision.allowed or decision.degraded or decision.remaining != 0:
            return
        if cost != 1 and not any_cost:
            return
        lasts = decision.retry_after * (1 - CLOCK_RATE_MARGIN) - ROUNDING_MARGIN
        until = asked_at + min(lasts, self.max_age)
        if until <= self.clock() or asked_at < self._cleared_at:
            return
        if self._token is _UNREAD and self.read_token is not None:
            # No token read yet: read one now (written if there is none), as
            # the baseline of later reads. This denial was asked for before
            # it, so it is not remembered; the next one will be.
            self.read_baseline()
            return
        entry = _Denial(
            asked_at,
            until,
            asked_at + decision.retry_after,
            asked_at + decision.reset_after,
            any_cost,
            decision.limit,
            decision.policy,
            decision.window,
        )
        with self._lock:
            # Popped first so that a key remembered again moves to the end.
            self._entries.pop(key, None)
            while len(self._entries) >= self.max_entries:
                del self._entries[next(iter(self._entries))]
            self._entries[key] = entry

    def read_baseline(self) -> None:
        """Read the reset token, so that the denials Redis gives from now on are remembered.

        Done when Redis first denies a hit in this process (or after a read
        failed), one round trip; a process or a test may do it beforehand.
        """
        if self.read_token is None or not self._checking.acquire(blocking=False):
            return
        try:
            started = self.clock()
            self.token_reads += 1
            try:
                token: object = self.read_token(reset_epoch.new_token())
            except Exception:  # Redis cannot answer: nothing is remembered
                return
            self._changed(token, started)
            self._confirmed_at = started
        finally:
            self._checking.release()

    def _changed(self, token: object, started: float) -> None:
        """Take ``token`` as the one in force; drop what was asked before ``started``."""
        self._token = token
        self._cleared_at = started
        with self._lock:
            for key, entry in list(self._entries.items()):
                if entry.asked_at < started:
                    del self._entries[key]

    def _confirm(self) -> bool:
        """Read the reset token; return whether the entries still hold.

        ``False`` when another thread is reading it (ask Redis meanwhile),
        when it changed (the entries remembered before are dropped), or
        when it cannot be read (likewise: the cache cannot vouch for them).
        Without ``read_token``, entries always hold.
        """
        if self.read_token is None:
            self._confirmed_at = math.inf
            return True
        if not self._checking.acquire(blocking=False):
            return False
        try:
            started = self.clock()
            self.token_reads += 1
            try:
                token: object = self.read_token(reset_epoch.new_token())
            except Exception:  # Redis cannot answer: hits ask it, and fail_open decides
                token = _UNREAD
            return self._confirmed(token, started)
        finally:
            self._checking.release()

    def aready(self) -> Awaitable[None] | None:
        """Before a decision on the event loop: the reset token's read to await, when a
        lookup would read it (:meth:`_confirm`), so that it does not block the loop;
        ``None`` when not due (without entries: one attribute test, nothing made)."""
        if (
            self._entries
            and self.read_token is not None
            and self.clock() - self._confirmed_at >= self.check_interval
        ):
            return self._aread(baseline=False)
        return None

    async def abaseline(self) -> None:
        """Before Redis's denial is remembered on the event loop: the baseline read of
        :meth:`remember` (a first denial's), awaited."""
        if self._token is _UNREAD and self.read_token is not None:
            await self._aread(baseline=True)

    async def _aread(self, *, baseline: bool) -> None:
        if not self._checking.acquire(blocking=False):
            return  # another reader: lookups ask Redis meanwhile
        try:
            started = self.clock()
            self.token_reads += 1
            try:
                token: object = await reset_epoch.aread_token(reset_epoch.new_token())
            except Exception:
                if baseline:
                    return
                token = _UNREAD
            if baseline:
                self._changed(token, started)
                self._confirmed_at = started
            else:
                self._confirmed(token, started)
        finally:
            self._checking.release()

    def _confirmed(self, token: object, started: float) -> bool:
        """Take the token read at ``started``; return whether the entries still hold."""
        if token is not _UNREAD and token == self._token:
            self._confirmed_at = started
            return True
        # Changed, never read before, or unreadable: what was remembered
        # before this read may be about state that is gone.
        self._changed(token, started)
        if token is not _UNREAD:
            self._confirmed_at = started
        return False

    def forget(self, key: str) -> None:
        """Drop the entry of ``key``, if any (``Policy.reset`` calls this)."""
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        """Drop every entry, and the reset token read: the next denial reads it again.

        As in a new process: the first denial Redis gives next is not
        remembered (the token is read then), the ones after it are.
        """
        with self._lock:
            self._entries.clear()
            self._token = _UNREAD
            self._confirmed_at = -math.inf
            self._cleared_at = -math.inf

    def _drop(self, key: str, entry: _Denial) -> None:
        with self._lock:
            # Another thread may have remembered a newer denial meanwhile.
            if self._entries.get(key) is entry:
                del self._entries[key]


@functools.cache
def get_deny_cache() -> DenyCache | None:
    """Return this process's deny cache, or ``None`` when ``DENY_CACHE_SIZE`` is 0.

    Built on first use and rebuilt (empty) when the settings change.
    """
    settings = get_settings()
    if settings.deny_cache_size == 0:
        return None
    return DenyCache(
        settings.deny_cache_size,
        settings.deny_cache_max_age,
        # CLOCK "app": the decisions' own clock (time.time_ns), so a test that
        # moves it (time-machine, freezegun) sees remembered denials end too.
        app_seconds if settings.clock == "app" else time.monotonic,
        read_token=reset_epoch.read_token,
        check_interval=reset_epoch.CHECK_INTERVAL,
    )


# CACHES too: the same keys on another Redis say nothing about this one.
forget_on_change(get_deny_cache.cache_clear, "DJANGO_RL", "CACHES")
