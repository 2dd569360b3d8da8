"""The Redis server's clock, as seen from this process without a round trip."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

#: Seconds between two measurements of the offset. Monotonic clocks drift
#: from the server's by well under 1 ms in this time.
RESYNC_INTERVAL = 30.0


class ClockUnavailable(Exception):
    """The offset is unknown and the measurement this call waited for failed."""


class ServerClock:
    """Estimate the Redis server's time from the local monotonic clock.

    Fixed windows are numbered from the server's clock, so that app servers
    whose clocks disagree still agree on where a window starts. Reading
    ``TIME`` before every decision would double its round trips, so the
    offset between the local monotonic clock and the server's clock is
    measured once, then again every :data:`RESYNC_INTERVAL` seconds. The
    estimate is off by at most half the round trip of that measurement. The
    monotonic clock makes it immune to steps of this host's wall clock.

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
        self._lock = threading.Lock()
        self._offset: float | None = None
        self._resync_at = 0.0
        self._failed_at = -math.inf

    def now_ms(self) -> int:
        """Return the estimated server time in milliseconds since the epoch.

        :raises ClockUnavailable: if the offset was never measured and the
            measurement this call waited for failed.
        """
        now = time.monotonic()
        if now >= self._resync_at:
            self._resync(now)
        offset = self._offset
        if offset is None:
            raise ClockUnavailable("the Redis server's clock could not be read")
        return int((now + offset) * 1000)

    def _resync(self, now: float) -> None:
        # With an offset, only one thread measures; the others keep the
        # previous offset rather than queue up behind a round trip. Without
        # one, they must wait for it.
        if not self._lock.acquire(blocking=self._offset is None):
            return
        try:
            if now < self._resync_at or self._failed_at >= now:
                # Another thread measured while we waited for the lock, or
                # tried and failed: Redis did not answer it either, so do not
                # wait a second time.
                return
            before = time.monotonic()
            try:
                seconds, microseconds = self._read_server_time()
            except BaseException:
                self._failed_at = time.monotonic()
                raise
            after = time.monotonic()
            self._offset = seconds + microseconds / 1e6 - (before + after) / 2
            self._resync_at = after + self._resync_interval
        finally:
            self._lock.release()
