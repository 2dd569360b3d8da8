"""The admin's history in Redis: its keys, one flush's writes, and the page's reads.

See ``history.py`` for what is counted and when; this module is the Redis
side of it: a minute's counts and top denied identities per policy
(:func:`counts_key`, :func:`top_key`), written in one pipeline per node
(:func:`write`), read back for the charts (:func:`read`).
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

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
