"""The last hour of decisions per policy, for the whole site, kept in Redis (the admin's charts).

What is kept, per policy and per minute of the app servers' clock:
allowed, denied and shadow-denied decisions (a degraded decision, made
while Redis could not answer, counts as allowed or denied like the others:
the charts show what the clients met), and the identities with the most
denials in that minute.

**No round trip per decision.** :func:`record` only adds to this process's
counts in memory (a lock and a dict increment). A daemon thread of each
process (:class:`Recorder`) writes them to Redis every
:data:`FLUSH_INTERVAL` seconds, one pipeline per Redis node, and once more
at exit. So the charts lag the decisions by about a second, and a process
killed without running its exit handlers loses at most its last
:data:`FLUSH_INTERVAL` of counts.

**Keys**, each with a TTL, none under a policy's own ``{KEY_PREFIX}:{policy}:``:

* ``{KEY_PREFIX}:~history:{<policy>}:<minute>``: a hash, fields ``a``
  (allowed), ``d`` (denied), ``s`` (shadow-denied); TTL :data:`COUNTS_TTL_MS`.
  ``<minute>`` is Unix time // 60. The policy is the hash tag, so a
  policy's hour lives in one slot of a cluster and reads in one pipeline.
* ``{KEY_PREFIX}:~history:{<policy>}:top:<minute>``: a sorted set,
  identity -> denials in that minute, trimmed to the :data:`TOP_KEPT` with
  the most after each write (ZINCRBY then ZREMRANGEBYRANK in the same
  pipeline); TTL :data:`TOP_TTL_MS`. Each flush sends only its own
  :data:`TOP_KEPT` most denied, and an identity trimmed out starts again
  from 0 if it comes back, so the list is exact while fewer than
  :data:`TOP_KEPT` identities are denied in a minute, and approximate beyond.
* ``{KEY_PREFIX}:~history:policies``: a sorted set, policy -> the last
  minute it was written, so the admin knows whose history to read;
  TTL :data:`COUNTS_TTL_MS`.

**Bounded memory.** In Redis: 60 small hashes per policy plus two top sets
of at most :data:`TOP_KEPT` members: 8,144 bytes per policy per hour at
the most (``MEMORY USAGE``, measured in tests/observability/test_history.py). In each
process: the counts of the minutes not yet written, and at most
:data:`MAX_IDENTITIES` denied identities per interval (more are counted as
denials, but not listed). Identities go through
:func:`~django_rl.core.keys.safe_identity` (at most 100 characters, digested
otherwise), so a hostile value cannot make a large member.

``DJANGO_RL["HISTORY"] = False`` turns it off: nothing is counted, no
thread starts.

**Redis failures.** A flush that fails (an outage, an error reply) puts
its counts back, to be written by a later flush; counts older than
:data:`RETRY_FOR_S` are dropped then (their keys would have expired). A
connection lost after Redis applied the pipeline but before it replied
makes those counts written twice (at-least-once). Nothing of this reaches a
request: only the thread talks to Redis.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Iterable

from django_rl.conf import forget_on_change
from django_rl.core.decision import Decision
from django_rl.core.keys import safe_identity
from django_rl.core.switches import LIMITS
from django_rl.observability.history_store import (
    COUNTS_TTL_MS,
    FIELDS,
    FLUSH_INTERVAL,
    MAX_IDENTITIES,
    MINUTES,
    REFUSALS,
    RETRY_FOR_S,
    TOP_KEPT,
    TOP_TTL_MS,
    Counts,
    Denied,
    counts_key,
    field_of,
    policies_key,
    read,
    top_key,
    write,
)

logger = logging.getLogger("django_rl")


class Recorder:
    """This process's counts not yet written, and the thread that writes them.

    :ivar autostart: whether the first :meth:`record` starts the thread (the
        test suite turns it off and calls :meth:`flush` where it means to).
    :ivar flushes: successful flushes so far, in this process.
    :ivar dropped: counts given up after :data:`RETRY_FOR_S` of failures.
    """

    def __init__(self) -> None:
        self.autostart = True
        self.flushes = 0
        self.dropped = 0
        self._reset_state()

    def _reset_state(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counts = {}
        self._denied: Denied = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._flushing = threading.Lock()

    def record(self, policy: str, decision: Decision, identity: str | None) -> None:
        """Count ``decision`` of ``policy`` (and ``identity`` if it denied); no I/O.

        Never raises: a decision calls it.
        """
        # The usual answer without calling field_of: this runs on every decision.
        self.count(policy, "a" if decision.allowed else field_of(decision), identity)

    def count(self, policy: str, field: str, identity: str | None) -> None:
        """Count one decision of ``policy`` in ``field`` (``a``, ``d`` or ``s``); no I/O."""
        if not (_enabled if _enabled is not None else _read_enabled()):
            return
        minute = int(time.time()) // 60
        key = (policy, minute, field)
        if self._thread is None and self.autostart:
            self.start()
        if field != "a" and identity is not None:
            identity = safe_identity(identity)  # bounded: a hostile value cannot grow memory
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1
            if field != "a" and identity is not None:
                self._count_denied(policy, minute, identity)

    def count_many(self, counted: Iterable[tuple[str, str, str | None]]) -> None:
        """Count each ``(policy, field, identity)`` as :meth:`count` does: one clock read, one lock.

        For the Decisions of one request of several policies.
        """
        if not (_enabled if _enabled is not None else _read_enabled()):
            return
        minute = int(time.time()) // 60
        if self._thread is None and self.autostart:
            self.start()
        rows = [
            (
                policy,
                field,
                identity if field == "a" or identity is None else safe_identity(identity),
            )
            for policy, field, identity in counted
        ]
        with self._lock:
            counts = self._counts
            for policy, field, identity in rows:
                key = (policy, minute, field)
                counts[key] = counts.get(key, 0) + 1
                if field != "a" and identity is not None:
                    self._count_denied(policy, minute, identity)

    def _count_denied(self, policy: str, minute: int, identity: str) -> None:
        # (Under the lock.) At most MAX_IDENTITIES a minute: a flood of new
        # identities cannot grow memory.
        who = self._denied.setdefault((policy, minute), {})
        if identity in who:
            who[identity] += 1
        elif len(who) < MAX_IDENTITIES:
            who[identity] = 1

    def pending(self) -> int:
        """Return the decisions counted in this process and not yet written."""
        with self._lock:
            return sum(self._counts.values())

    def settled(self) -> bool:
        """Return whether every count so far is written: none pending, no flush under way."""
        return not self._flushing.locked() and self.pending() == 0

    def start(self) -> None:
        """Start the flushing thread unless one runs. Never raises."""
        with self._lock:
            if self._thread is not None:
                return
            thread = threading.Thread(target=self._run, name="django_rl history", daemon=True)
            self._thread = thread
        try:
            thread.start()
        except RuntimeError as exc:  # no thread can start: counts are written at exit
            logger.warning("Rate-limit history cannot be written in the background: %s", exc)

    @property
    def running(self) -> bool:
        """Return whether the flushing thread runs in this process."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def _run(self) -> None:
        while not self._stop.wait(FLUSH_INTERVAL):
            if not LIMITS.off:  # rate_limits_disabled: no Redis command while on
                self.flush()

    def flush(self) -> bool:
        """Write the counts so far to Redis; return whether every one was written.

        Never raises. What could not be written is kept for the next flush
        (see the module).
        """
        with self._flushing:  # the thread, the exit handler and tests may meet here
            with self._lock:
                counts, self._counts = self._counts, {}
                denied, self._denied = self._denied, {}
            if not counts:
                return True
            try:
                failed = write(counts, denied)
            except Exception as exc:  # settings, an unexpected reply: keep the counts
                logger.debug("Rate-limit history could not be written: %s", exc)
                failed = set(counts)
            if failed:
                self._put_back(counts, denied, failed)
                return False
            self.flushes += 1
            return True

    def _put_back(self, counts: Counts, denied: Denied, failed: set[tuple[str, int, str]]) -> None:
        """Keep the counts of ``failed`` for the next flush, those too old dropped."""
        oldest = int(time.time() - RETRY_FOR_S) // 60
        with self._lock:
            for key in failed:
                if key[1] < oldest:
                    self.dropped += counts[key]
                    continue
                self._counts[key] = self._counts.get(key, 0) + counts[key]
            for (policy, minute), who in denied.items():
                if minute < oldest or (policy, minute, "d") not in failed:
                    continue
                kept = self._denied.setdefault((policy, minute), {})
                for identity, n in who.items():
                    if identity in kept or len(kept) < MAX_IDENTITIES:
                        kept[identity] = kept.get(identity, 0) + n

    def stop(self, timeout: float = 5) -> None:
        """Stop the thread (if any) after its current flush, waiting at most ``timeout`` s."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=timeout)
        self._stop = threading.Event()
        self._thread = None

    def discard(self) -> None:
        """Forget the counts not yet written (for tests)."""
        with self._lock:
            self._counts.clear()
            self._denied.clear()

    def at_exit(self) -> None:
        """Stop the thread, then write what is left as the process exits.

        The thread is stopped first (waiting at most :data:`EXIT_WAIT` for a
        flush under way): a daemon thread still writing to a stream (a
        warning) when the interpreter finalizes can abort the process
        (Python's ``_enter_buffered_busy`` fatal error).
        """
        self.stop(EXIT_WAIT)
        if self.autostart:
            self.flush()

    def after_fork(self) -> None:
        """In a forked child: no thread runs and the parent's counts are the parent's."""
        self._reset_state()


#: Whether HISTORY is on: read once, again when the settings change.
_enabled: bool | None = None


def _read_enabled() -> bool:
    """Read ``DJANGO_RL["HISTORY"]`` (once per settings change: decisions call this)."""
    global _enabled
    try:
        from django_rl.conf import get_settings

        _enabled = get_settings().history
    except Exception:  # invalid settings: every decision reports them already
        return False
    return _enabled


def _reread() -> None:
    global _enabled
    _enabled = None


forget_on_change(_reread)


#: Seconds an exiting process waits for the thread's flush under way.
EXIT_WAIT = 1.0

RECORDER = Recorder()
os.register_at_fork(after_in_child=RECORDER.after_fork)
atexit.register(RECORDER.at_exit)


def record(policy: str, decision: Decision, identity: str | None = None) -> None:
    """Count one decision of ``policy`` in this process (see the module); never raises."""
    # What Recorder.record does, written out: this runs on every decision.
    RECORDER.count(policy, "a" if decision.allowed else field_of(decision), identity)


def record_result(policy: str, allowed: bool, identity: str | None = None) -> None:
    """Count one decision made without a :class:`Decision` (the django-ratelimit drop-in's)."""
    RECORDER.count(policy, "a" if allowed else "d", identity)


def flush() -> bool:
    """Write this process's counts to Redis now; return whether all were written."""
    return RECORDER.flush()


__all__ = [
    "COUNTS_TTL_MS",
    "FIELDS",
    "MINUTES",
    "RECORDER",
    "REFUSALS",
    "TOP_KEPT",
    "TOP_TTL_MS",
    "Recorder",
    "counts_key",
    "field_of",
    "flush",
    "policies_key",
    "read",
    "record",
    "record_result",
    "top_key",
    "write",
]
