"""Redis trouble as one process sees it: outages, error replies, and the calls they failed.

An outage logs one line when it starts and one when it ends; each cause of
error replies logs one line per incident (see ``errors.py`` for which is
which); every failed call is counted by kind.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

from django_rl.backends.errors import REPLIES, brief, outage_kind

logger = logging.getLogger("django_rl")

#: An incident of error replies ends at the first call that succeeds at
#: least this many seconds after the last reply of its cause: the cause has
#: stopped, and the next such reply starts another incident, logged again.
#: Not at any success: at maxmemory, reads and some scripts succeed between
#: failed writes, and each of those would end an incident that goes on.
#: Nor by time alone: a quiet site meeting a lasting OOM once a minute would
#: log every request.
INCIDENT_QUIET = 1.0


def _none(alias: str) -> tuple[str, ...]:
    return ()


def _uncounted(kind: str) -> None:
    pass


#: ``(kind) -> None``: counts a failed call by kind in the metrics
#: (``observability.metrics.count_redis_error``). Installed by
#: ``AppConfig.ready``: observability sits above the backends, which never
#: import it. It must not raise.
count_error: Callable[[str], None] = _uncounted


#: ``(alias) -> names`` of the policies on that alias that have a
#: ``fallback_rate``, for the log lines. Set by the policy registry (which the
#: backends do not import); it must not raise.
fallback_policies: Callable[[str], tuple[str, ...]] = _none


def _what_decides(alias: str, *, reply: bool) -> str:
    """Return what the log lines say decides while Redis cannot: the fallback, or fail_open."""
    names = ", ".join(map(repr, fallback_policies(alias)))
    if reply:
        if not names:
            return "decisions it cannot answer follow fail_open"
        return (
            "decisions it cannot answer are made in each process at the fallback_rate of "
            f"policies {names}, the others follow fail_open"
        )
    if not names:
        return "decisions follow fail_open (default FAIL_OPEN)"
    return (
        f"policies {names} decide in each process at their fallback_rate, "
        "the other decisions follow fail_open (default FAIL_OPEN)"
    )


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

    An error reply of a live server (:meth:`answered_with_error`) is no
    outage: it changes nothing here but the count and its cause's incident.

    :param on_end: called when an outage ends, under the lock and before the
        new epoch is visible (see :meth:`succeeded`); it must not raise.
    """

    #: See :data:`INCIDENT_QUIET`; tests shorten it on an instance.
    incident_quiet = INCIDENT_QUIET

    def __init__(
        self, alias: str, address: str = "", on_end: Callable[[], None] | None = None
    ) -> None:
        self.alias = alias
        self._on_end = on_end
        #: What the log lines call the server: ``CACHES['x']``, and the
        #: node's address when the alias has several (a cluster).
        self.name = f"CACHES[{alias!r}]" + (f", node {address}" if address else "")
        self.down = False
        #: Outages seen so far (each logged once, with one line when it ended).
        self.outages = 0
        #: The calls Redis could not answer, by kind (``errors.py``): every
        #: decision, peek or reset that failed, exactly, whatever the threads.
        self.errors: Counter[str] = Counter()
        self._epoch = 0
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()
        #: Kind of error reply -> when a call last met it (``time.monotonic``).
        self._replies_seen: dict[str, float] = {}

    @property
    def epoch(self) -> int:
        """Return a number that changes each time Redis goes down or comes back."""
        return self._epoch

    def failed(self, exc: Exception, epoch: int | None = None) -> bool:
        """Record a call, started in ``epoch`` (default: now), that Redis did not answer.

        :return: whether this call started an outage.
        """
        self._count(outage_kind(exc))
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
                "Redis for rate limiting (%s) is unavailable (%s: %s); %s until it answers again.",
                self.name,
                type(exc).__name__,
                brief(exc),
                _what_decides(self.alias, reply=False),
            )
            _details(self.name, exc)
        return True

    def succeeded(self, epoch: int | None = None) -> bool:
        """Record a call, started in ``epoch`` (default: now), that Redis answered.

        :return: whether this call ended an outage.
        """
        if self._replies_seen:
            self._end_incidents()
        if not self.down:
            return False  # the hot path: two attribute reads, no lock
        with self._lock:
            if not self.down or (epoch is not None and epoch != self._epoch):
                return False
            # on_end first (a node replaces its connections there): a call
            # that reads the new epoch must also see what on_end changed.
            # Otherwise a thread could start a call in the new epoch on a
            # connection from before the end of the outage (after a failover
            # behind a moved address, one to the demoted primary), and its
            # READONLY would log a second outage that never was.
            if self._on_end is not None:
                self._on_end()
            self.down = False
            self._epoch += 1
            logger.info("Redis for rate limiting (%s) is back.", self.name)
        return True

    def answered_with_error(self, exc: Exception, kind: str, epoch: int | None = None) -> bool:
        """Record a call, started in ``epoch``, that a live server answered with an error reply.

        Counts it under ``kind`` (a name of ``errors.REPLIES``) and logs the
        first of an incident: one line per cause, however many calls meet
        it, until a call succeeds :attr:`incident_quiet` seconds or more
        after the last one. An answer is no outage: it ends one that was
        under way, as :meth:`succeeded`.

        :return: whether this call ended an outage.
        """
        self._incident(exc, kind)
        return self.succeeded(epoch)

    def unlocated(self, exc: Exception) -> None:
        """Record a call that failed because no sentinel could name the primary.

        Counted as ``sentinel`` and logged once per incident, like an error
        reply; but no answer of the server either: an outage under way goes
        on, and nothing ends it here.
        """
        self._incident(exc, "sentinel")

    def pool_exhausted(self, exc: Exception) -> None:
        """Record a call that waited a whole socket timeout for a connection of the pool.

        Counted as ``pool`` and logged once per incident, like an error
        reply; no answer of the server either, so nothing starts or ends an
        outage here. During an outage it is only counted: the outage's line
        explains it (the connections are held by calls waiting for a server
        that does not answer).
        """
        if self.down:
            self._count("pool")
            return
        self._incident(exc, "pool")

    def _incident(self, exc: Exception, kind: str) -> None:
        self._count(kind)
        now = time.monotonic()
        with self._lock:
            new = kind not in self._replies_seen
            self._replies_seen[kind] = now
            if new:
                reply = REPLIES[kind]
                logger.log(
                    reply.level,
                    "Redis for rate limiting (%s) %s (%s: %s); %s, and each asks it again. "
                    "%s. Logged once per incident: "
                    "until a call succeeds %g s or more after the last such error.",
                    self.name,
                    reply.cause,
                    type(exc).__name__,
                    brief(exc),
                    _what_decides(self.alias, reply=True),
                    reply.fix,
                    self.incident_quiet,
                )
                _details(self.name, exc)

    def _end_incidents(self) -> None:
        now = time.monotonic()
        with self._lock:
            for kind, last in list(self._replies_seen.items()):
                if now - last >= self.incident_quiet:
                    del self._replies_seen[kind]

    def _count(self, kind: str) -> None:
        # A lock: ``+=`` on a Counter is a read and a write, and two threads
        # failing at once would count one.
        with self._count_lock:
            self.errors[kind] += 1
        count_error(kind)


def _details(name: str, exc: Exception) -> None:
    """Log the whole message of ``exc`` at DEBUG when the line above shortened it."""
    if brief(exc) != str(exc):
        logger.debug("Redis for rate limiting (%s): the whole error: %s", name, exc)
