"""The Redis server's clock, as seen from this process without a round trip."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

#: Seconds between two measurements of the offset. Monotonic clocks drift
#: from the server's by well under 1 ms in this time.
RESYNC_INTERVAL = 30.0


class ServerClock:
    """Estimate the Redis server's time from the local monotonic clock.

    Fixed windows are numbered from the server's clock, so that app servers
    whose clocks disagree still agree on where a window starts. Reading
    ``TIME`` before every decision would double its round trips, so the
    offset between the local monotonic clock and the server's clock is
    measured once, then again every :data:`RESYNC_INTERVAL` seconds. The
    estimate is off by at most half the round trip of that measurement. The
    monotonic clock makes it immune to steps of this host's wall clock.

    :param read_server_time: returns the server's ``TIME`` as
        ``(seconds, microseconds)``; it may raise (Redis down), in which case
        :meth:`now_ms` raises too and the next call tries again.
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

    def now_ms(self) -> int:
        """Return the estimated server time in milliseconds since the epoch."""
        now = time.monotonic()
        if now >= self._resync_at:
            self._resync(now)
        assert self._offset is not None
        return int((now + self._offset) * 1000)

    def _resync(self, now: float) -> None:
        # Only one thread measures; the others keep the previous offset, if
        # there is one, rather than queue up behind a round trip.
        if not self._lock.acquire(blocking=self._offset is None):
            return
        try:
            if now < self._resync_at:
                return  # another thread measured while we waited for the lock
            before = time.monotonic()
            seconds, microseconds = self._read_server_time()
            after = time.monotonic()
            self._offset = seconds + microseconds / 1e6 - (before + after) / 2
            self._resync_at = after + self._resync_interval
        finally:
            self._lock.release()
