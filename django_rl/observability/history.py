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
the most (``MEMORY USAGE``, measured in tests/test_history.py). In each
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
import heapq
import logging
import os
import threading
import time
from collections.abc import Iterable
from typing import Any

from django_rl.conf import forget_on_change
from django_rl.core.decision import Decision
from django_rl.core.keys import safe_identity
from django_rl.docs_urls import doc_url

logger = logging.getLogger("django_rl")

#: Seconds between two writes of a process's counts.
FLUSH_INTERVAL = 1.0
#: Minutes shown (and kept) per policy.
MINUTES = 60
#: TTL of a minute's counts: the hour shown plus a margin for clock skew.
COUNTS_TTL_MS = (MINUTES + 5) * 60_000
#: TTL of a minute's top denied identities: the page shows this minute and the last.
TOP_TTL_MS = 3 * 60_000
#: Identities kept per policy and minute in Redis.
TOP_KEPT = 20
#: Denied identities tracked per policy, minute and flush interval in a process.
MAX_IDENTITIES = 1_000
#: Counts a failed flush keeps for a later one at most this long (seconds).
RETRY_FOR_S = MINUTES * 60
#: The hash fields of a minute: ``Decision`` kind -> field.
FIELDS = {"allowed": "a", "denied": "d", "shadow_denied": "s"}

# (policy, minute, field) -> count; (policy, minute) -> identity -> denials.
Counts = dict[tuple[str, int, str], int]
Denied = dict[tuple[str, int], dict[str, int]]


def counts_key(prefix: str, policy: str, minute: int) -> str:
    """Return the key of ``policy``'s counts in ``minute`` (Unix time // 60)."""
    return f"{prefix}:~history:{{{_tag(policy)}}}:{minute}"


def top_key(prefix: str, policy: str, minute: int) -> str:
    """Return the key of ``policy``'s most denied identities in ``minute``."""
    return f"{prefix}:~history:{{{_tag(policy)}}}:top:{minute}"


def policies_key(prefix: str) -> str:
    """Return the key listing the policies with a history."""
    return f"{prefix}:~history:policies"


def _tag(policy: str) -> str:
    # A policy name comes from the settings or an inline group's digest;
    # safe_identity still guards the hash tag against braces.
    return safe_identity(policy)


def field_of(decision: Decision) -> str:
    """Return the hash field ``decision`` counts in (``a``, ``d`` or ``s``)."""
    if decision.allowed:
        return "a"
    return "s" if decision.shadow else "d"


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
        # field_of, inline for the usual answer: this runs on every decision.
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


def write(counts: Counts, denied: Denied) -> set[tuple[str, int, str]]:
    """Write ``counts`` and ``denied`` to Redis, one pipeline per node; return what failed.

    :raises Exception: when the settings or the topology cannot be read
        (nothing was written).
    """
    from redis.exceptions import RedisError

    from django_rl.backends import get_backend
    from django_rl.conf import get_settings

    settings = get_settings()
    prefix = settings.key_prefix
    backend = get_backend(settings.connection)
    # Group the commands by node: one pipeline each. Each entry is the
    # count keys a command carries, so an error reply puts back just those.
    by_node: dict[Any, list[tuple[tuple[Any, ...], tuple[str, int, str] | None]]] = {}
    latest: dict[str, int] = {}

    def queue(key: str, command: tuple[Any, ...], count: tuple[str, int, str] | None) -> None:
        by_node.setdefault(backend.node_for(key), []).append((command, count))

    for count_key, n in counts.items():
        policy, minute, field = count_key
        key = counts_key(prefix, policy, minute)
        queue(key, ("HINCRBY", key, field, n), count_key)
        queue(key, ("PEXPIRE", key, COUNTS_TTL_MS), None)
        latest[policy] = max(latest.get(policy, minute), minute)
    for (policy, minute), who in denied.items():
        key = top_key(prefix, policy, minute)
        # Only this process's top few: the set then never holds more than
        # 2 * TOP_KEPT members, small enough for Redis's compact encoding.
        for identity, n in heapq.nlargest(TOP_KEPT, who.items(), key=_by_count):
            queue(key, ("ZINCRBY", key, n, identity), None)
        queue(key, ("ZREMRANGEBYRANK", key, 0, -TOP_KEPT - 1), None)
        queue(key, ("PEXPIRE", key, TOP_TTL_MS), None)
    listing = policies_key(prefix)
    # GT: a retried flush of an older minute never moves a policy back.
    queue(listing, ("ZADD", listing, "GT", *_pairs(latest)), None)
    # Policies quiet for the whole hour leave the listing (it is renewed by
    # every flush, so its TTL alone would never drop them).
    oldest = max(latest.values()) - MINUTES
    queue(listing, ("ZREMRANGEBYSCORE", listing, "-inf", f"({oldest}"), None)
    queue(listing, ("PEXPIRE", listing, COUNTS_TTL_MS), None)

    failed: set[tuple[str, int, str]] = set()
    for node, commands in by_node.items():
        try:
            # One write, one read on the thread's kept connection; error
            # replies come back in place (not raised), so each is judged alone.
            replies = node.client.command_replies([(command, {}) for command, _ in commands])
        except RedisError as exc:
            logger.debug("Rate-limit history: %s could not be written: %s", node, exc)
            failed.update(count for _, count in commands if count is not None)
            continue
        for (command, count), reply in zip(commands, replies, strict=True):
            if isinstance(reply, Exception):
                REFUSALS.warn(str(command[0]), reply)
                if count is not None:
                    failed.add(count)
    return failed


#: What to do about a write Redis refused, by kind of error reply.
_REFUSAL_HINTS = {
    "noperm": (
        "The connection's ACL user lacks a command the history needs: give it the rule "
        "of django_rl.checks.acl.acl_rule(KEY_PREFIX) "
        f"({doc_url('security', 'a-redis-user-of-its-own')})."
    ),
    "oom": "Redis is out of memory (maxmemory) with a noeviction policy.",
}


class Refusals:
    """Warns, at most once per :attr:`interval` seconds per kind of error, of writes refused.

    A live server that refuses the history's writes (an ACL user without
    ``HINCRBY``, memory full) leaves the admin's charts empty; the decisions
    themselves are not affected, so nothing else would say so. Connection
    failures are not refusals: the decisions' own outage log covers them.
    """

    def __init__(self, interval: float = 600.0) -> None:
        self.interval = interval
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def warn(self, command: str, exc: Exception) -> None:
        from django_rl.backends.errors import brief, reply_kind

        kind = reply_kind(exc) or type(exc).__name__
        now = time.monotonic()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self.interval:
                return
            self._last[kind] = now
        logger.warning(
            "Rate-limit history: Redis refused %s (%s); the admin's charts miss these "
            "counts while it does (they are retried for an hour, then dropped). %s",
            command,
            brief(exc),
            _REFUSAL_HINTS.get(kind, ""),
        )

    def reset(self) -> None:
        """Forget the warnings given (for tests)."""
        with self._lock:
            self._last.clear()


REFUSALS = Refusals()


def _by_count(item: tuple[str, int]) -> int:
    return item[1]


def _pairs(latest: dict[str, int]) -> list[Any]:
    pairs: list[Any] = []
    for policy, minute in latest.items():
        pairs += [minute, policy]
    return pairs


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
    # Recorder.record, inline: this runs on every decision.
    RECORDER.count(policy, "a" if decision.allowed else field_of(decision), identity)


def record_result(policy: str, allowed: bool, identity: str | None = None) -> None:
    """Count one decision made without a :class:`Decision` (the django-ratelimit drop-in's)."""
    RECORDER.count(policy, "a" if allowed else "d", identity)


def flush() -> bool:
    """Write this process's counts to Redis now; return whether all were written."""
    return RECORDER.flush()


def read(names: Iterable[str] | None = None, *, now: float | None = None) -> dict[str, Any]:
    """Return the last :data:`MINUTES` minutes of history, as the admin's JSON shows it.

    ``{"minutes": [<minute>, ...] (oldest first, Unix time // 60),
    "policies": {name: {"allowed": [...], "denied": [...], "shadow_denied": [...],
    "top": [[identity, denials], ...]}}}``, a list entry per minute; ``top``
    adds up this minute's and the last's denials, most first. ``names``: the
    policies to read (default: every policy with a history).

    :raises redis.exceptions.RedisError: if Redis cannot answer.
    """
    from django_rl.backends import get_backend
    from django_rl.conf import get_settings

    settings = get_settings()
    prefix = settings.key_prefix
    backend = get_backend(settings.connection)
    current = int(time.time() if now is None else now) // 60
    minutes = list(range(current - MINUTES + 1, current + 1))
    if names is None:
        listing = policies_key(prefix)
        found = backend.run(listing, _zrange_since, current - MINUTES + 1)
        names = sorted(name.decode() if isinstance(name, bytes) else name for name in found)
    answer: dict[str, Any] = {"minutes": minutes, "policies": {}}
    for name in names:
        key = counts_key(prefix, name, current)
        answer["policies"][name] = backend.run(key, _read_policy, prefix, name, minutes)
    return answer


def _zrange_since(node: Any, key: str, minute: int) -> list[Any]:
    return list(node.client.zrangebyscore(key, minute, "+inf"))


def _read_policy(node: Any, key: str, prefix: str, name: str, minutes: list[int]) -> Any:
    """Read one policy's hour in one pipeline (its keys share a hash tag, so a node)."""

    def queue(pipe: Any) -> None:
        for minute in minutes:
            pipe.hmget(counts_key(prefix, name, minute), "a", "d", "s")
        for minute in minutes[-2:]:
            pipe.zrange(top_key(prefix, name, minute), 0, -1, withscores=True)

    _, replies = node.pipeline(queue)
    series: dict[str, list[int]] = {kind: [] for kind in FIELDS}
    for reply in replies[: len(minutes)]:
        for kind, value in zip(FIELDS, reply, strict=True):
            series[kind].append(int(value or 0))
    top: dict[str, int] = {}
    for reply in replies[len(minutes) :]:
        for member, score in reply:
            identity = member.decode() if isinstance(member, bytes) else member
            top[identity] = top.get(identity, 0) + int(score)
    ranked = sorted(top.items(), key=lambda item: (-item[1], item[0]))[:TOP_KEPT]
    return {**series, "top": [list(item) for item in ranked]}
