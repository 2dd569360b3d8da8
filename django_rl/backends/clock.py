"""The Redis server's clock, as seen from this process without a round trip."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from redis.exceptions import ResponseError

#: Seconds between two reads of ``TIME`` while nothing else tells the clock.
RESYNC_INTERVAL = 30.0

#: How fast this host's monotonic clock and the server's clock may drift
#: apart, in seconds per second: 100 ppm, ten times what NTP-disciplined
#: clocks show. A bound learned at one moment is widened by this much for
#: every second since, so it stays a bound however the two clocks drift.
MAX_DRIFT = 1e-4


def app_ms() -> int:
    """Return this host's wall-clock time in ms, read from ``time.time_ns()`` at each call.

    The clock of ``CLOCK: "app"``: decisions and everything that keeps time
    in them (the deny cache, the outage fallback) read it, so time-machine
    and freezegun, which move ``time.time_ns``, move django_rl's clock.
    """
    return time.time_ns() // 1_000_000


#: Where :func:`app_seconds` counts from: small numbers keep a float's
#: precision (at 1.8e9 s from the epoch it is about 0.2 µs, enough to move a
#: Retry-After rounded up to the millisecond).
_APP_ORIGIN_NS = time.time_ns()


def app_seconds() -> float:
    """Return :func:`app_ms`'s clock in seconds (``time.time_ns()``, read at each call).

    Counted from an origin (this module's import), like a monotonic clock's
    readings: for differences of times, as the deny cache takes them. It may
    go back, or below 0, when ``time.time_ns`` is moved back.
    """
    return (time.time_ns() - _APP_ORIGIN_NS) / 1e9


class ClockUnavailable(Exception):
    """The offset is unknown and the measurement this call waited for failed."""


class ClockError(ResponseError):
    """No window could be found on the server's clock within a few attempts.

    Only possible while the server's clock keeps jumping. Like an error reply
    of a live server (see ``backends/errors.py``), not an outage: Redis could
    not answer this decision (``fail_open`` decides); the next one asks again.
    """


class Bounds(NamedTuple):
    """What is known of ``server time - local monotonic time``, in seconds.

    ``low <= offset <= high`` held at local time ``at``; each side widens by
    :data:`MAX_DRIFT` per second since.
    """

    low: float
    high: float
    at: float

    def widened(self, now: float) -> tuple[float, float]:
        slack = MAX_DRIFT * max(now - self.at, 0.0)
        return self.low - slack, self.high + slack


class ServerClock:
    """Bound the Redis server's time from the local monotonic clock.

    Fixed windows are numbered from the server's clock, so that app servers
    whose clocks disagree still agree on where a window starts. Reading
    ``TIME`` before every decision would double its round trips, so the
    clock keeps *bounds* on the offset between the local monotonic clock and
    the server's clock, learned from readings of the server's clock:

    * a reading ``S`` taken by the server between local times ``sent`` and
      ``received`` proves ``S - received <= offset <= S - sent``. A reply
      read late (a GIL held by another thread, a paused VM, a slow network)
      only makes that interval wide; it never moves the bounds already known
      the wrong way. A slow sample is never trusted as a fast one.
    * readings come from ``TIME`` (first use, then every
      :data:`RESYNC_INTERVAL` seconds, or on demand with :meth:`resync`) and,
      for free, from every fixed-window hit, whose ``PTTL`` of a key that
      dies at a known time tells the server's time to the millisecond.

    :meth:`now_ms` answers the **lower bound**: the server's time is at least
    that. A fixed-window hit numbered from it can land in a window that has
    already ended on the server, which the server's reply shows (the hit
    then tries the next window), but never in one that has not begun yet.
    A reading outside the bounds means the server's clock stepped (a
    failover to a host whose clock differs, an operator's change): the
    bounds then start again from that reading. The monotonic clock makes the
    estimate immune to steps of this host's wall clock.

    While Redis does not answer, a call of :meth:`now_ms` costs at most one
    measurement, the caller's own or one it waited for, never one per thread
    in a queue: a caller that waited for a measurement which failed raises
    :class:`ClockUnavailable` at once instead of trying again.

    :param read_server_time: returns the server's ``TIME`` as
        ``(seconds, microseconds)``; it may raise (Redis down), in which case
        :meth:`now_ms` raises it and a later call tries again.
    """

    def __init__(
        self,
        read_server_time: Callable[[], tuple[int, int]],
        resync_interval: float = RESYNC_INTERVAL,
    ) -> None:
        self._read_server_time = read_server_time
        self._resync_interval = resync_interval
        self._lock = threading.Lock()  # held while reading TIME
        self._update_lock = threading.Lock()  # held while changing the bounds
        # One attribute, replaced whole, so readers need no lock.
        self._bounds: Bounds | None = None
        self._resync_at = 0.0
        self._failed_at = -math.inf
        self._measured_at = -math.inf
        #: How many times the server's clock was seen to step (for tests and logs).
        self.steps = 0

    def now_ms(self) -> int:
        """Return a lower bound of the server's time, in ms since the epoch.

        :raises ClockUnavailable: if the offset was never measured and the
            measurement this call waited for failed.
        """
        now = time.monotonic()
        if now >= self._resync_at:
            self._measure(now, wait=self._bounds is None, force=False)
        bounds = self._bounds
        if bounds is None:
            raise ClockUnavailable("the Redis server's clock could not be read")
        low, _ = bounds.widened(now)
        return math.floor((now + low) * 1000)

    def now_range_ms(self) -> tuple[int, int]:
        """Return the bounds of the server's time in ms: it is within ``[low, high]``.

        :raises ClockUnavailable: as :meth:`now_ms`.
        """
        now = time.monotonic()
        if now >= self._resync_at:
            self._measure(now, wait=self._bounds is None, force=False)
        bounds = self._bounds
        if bounds is None:
            raise ClockUnavailable("the Redis server's clock could not be read")
        # Both sides at one reading of the local clock (Bounds.widened, inline:
        # this runs on every fixed-window decision with blocks).
        slack = MAX_DRIFT * max(now - bounds.at, 0.0)
        low_ms = math.floor((now + bounds.low - slack) * 1000)
        return low_ms, max(low_ms, math.ceil((now + bounds.high + slack) * 1000))

    def estimate_ms(self) -> int | None:
        """Return the middle of the bounds of the server's time in ms, without any round trip.

        ``None`` while nothing is known of it (no reading yet), or the bounds
        are wider than an hour. For callers that only need to be near the
        server's time and learn it from their own replies (``quota``).
        """
        bounds = self._bounds
        if bounds is None:
            return None
        now = time.monotonic()
        low, high = bounds.widened(now)
        if not high - low < 3600.0:
            return None
        return math.floor((now + (low + high) / 2) * 1000)

    def resync(self) -> None:
        """Read ``TIME`` now (or wait for a thread that is reading it).

        :raises redis.exceptions.RedisError: if Redis does not answer.
        """
        self._measure(time.monotonic(), wait=True, force=True)

    def due(self) -> bool:
        """Return whether the next :meth:`now_ms` would read ``TIME`` (the async path reads
        it first, on its own connection, and hands it to :meth:`measured`)."""
        return time.monotonic() >= self._resync_at

    def measured(self, seconds: int, microseconds: int, sent: float, received: float) -> None:
        """Learn from a ``TIME`` read between ``sent`` and ``received`` (as :meth:`resync`)."""
        server = seconds + microseconds / 1e6
        # (Not under the lock a thread holds while it reads TIME: the loop never waits on it.)
        self._learn(server - received, server + 1e-6 - sent, received)
        self._measured_at = received
        self._resync_at = received + self._resync_interval

    def observe(self, server_ms: float, sent: float, received: float) -> None:
        """Learn from a reading of the server's clock.

        :param server_ms: the server's time in ms, truncated to the
            millisecond (the true time is within ``[server_ms, server_ms + 1)``).
        :param sent: local monotonic time before the command was sent.
        :param received: local monotonic time after its reply was read.
        """
        self._learn(server_ms / 1000 - received, (server_ms + 1) / 1000 - sent, received)

    def observe_at_least(self, server_ms: float, received: float) -> None:
        """Learn that the server's time was at least ``server_ms`` before ``received``."""
        self._learn(server_ms / 1000 - received, math.inf, received)

    def _learn(self, low: float, high: float, now: float) -> None:
        with self._update_lock:
            bounds = self._bounds
            if bounds is None:
                self._bounds = Bounds(low, high, now)
                return
            known_low, known_high = bounds.widened(now)
            if high < known_low or low > known_high:
                # Both cannot hold: the server's clock stepped. Only the new
                # reading describes it now.
                self.steps += 1
                self._bounds = Bounds(low, high, now)
            else:
                self._bounds = Bounds(max(known_low, low), min(known_high, high), now)

    def _measure(self, now: float, wait: bool, force: bool) -> None:
        # With bounds, only one thread measures; the others keep the bounds
        # rather than queue up behind a round trip. Without them (or when a
        # caller needs a fresh reading), they wait for it.
        if not self._lock.acquire(blocking=wait):
            return
        try:
            if (
                self._measured_at >= now
                or self._failed_at >= now
                or (not force and now < self._resync_at)
            ):
                # Another thread measured while we waited for the lock, or
                # tried and failed: Redis did not answer it either, so do not
                # wait a second time.
                return
            sent = time.monotonic()
            try:
                seconds, microseconds = self._read_server_time()
            except BaseException:
                self._failed_at = time.monotonic()
                raise
            received = time.monotonic()
            server = seconds + microseconds / 1e6
            self._learn(server - received, server + 1e-6 - sent, received)
            self._measured_at = received
            self._resync_at = received + self._resync_interval
        finally:
            self._lock.release()
