"""Outages of Redis as one process sees them: one log line when one starts, one when it ends."""

from __future__ import annotations

import logging
import threading

logger = logging.getLogger("django_rl")


class Health:
    """Track whether the Redis behind one ``CACHES`` alias (or one node of its cluster) answers.

    A dead Redis must log one warning, not one per request, and one info line
    when it answers again. Callers read :attr:`epoch` before they talk to
    Redis and pass it to :meth:`failed` or :meth:`succeeded`; the state only
    changes for a call that started in the current epoch. Under concurrency
    that matters: a call that was sent before Redis died and is answered just
    after another call saw the failure must not log "back", and a call stuck
    on a paused server that times out just after Redis resumed must not log a
    new outage. Without epochs the moments Redis dies and returns would each
    log a flurry of warning/info pairs.
    """

    def __init__(self, alias: str, address: str = "") -> None:
        self.alias = alias
        #: What the log lines call the server: ``CACHES['x']``, and the
        #: node's address when the alias has several (a cluster).
        self.name = f"CACHES[{alias!r}]" + (f", node {address}" if address else "")
        self.down = False
        #: Outages seen so far (each logged once, with one line when it ended).
        self.outages = 0
        self._epoch = 0
        self._lock = threading.Lock()

    @property
    def epoch(self) -> int:
        """Return a number that changes each time Redis goes down or comes back."""
        return self._epoch

    def failed(self, exc: Exception, epoch: int | None = None) -> bool:
        """Record a call, started in ``epoch`` (default: now), that Redis did not answer.

        :return: whether this call started an outage.
        """
        if self.down:
            return False
        with self._lock:
            if self.down or (epoch is not None and epoch != self._epoch):
                return False
            self.down = True
            self._epoch += 1
            self.outages += 1
            # Logged under the lock, so the log shows transitions in the order
            # they happened (this runs once per outage, not per request).
            logger.warning(
                "Redis for rate limiting (%s) is unavailable (%s: %s); "
                "decisions follow fail_open (default FAIL_OPEN) until it answers again.",
                self.name,
                type(exc).__name__,
                exc,
            )
        return True

    def succeeded(self, epoch: int | None = None) -> bool:
        """Record a call, started in ``epoch`` (default: now), that Redis answered.

        :return: whether this call ended an outage.
        """
        if not self.down:
            return False  # the hot path: one attribute read, no lock
        with self._lock:
            if not self.down or (epoch is not None and epoch != self._epoch):
                return False
            self.down = False
            self._epoch += 1
            logger.info("Redis for rate limiting (%s) is back.", self.name)
        return True
