"""What a Redis error means for a decision: an outage, or an error reply of a live server.

An **outage** is a server that does not answer (refused, reset, timed out),
or answers that it cannot serve anything now (``LOADING``, ``BUSY``, a
replica's ``READONLY``, a primary's ``NOREPLICAS``, ``CLUSTERDOWN``,
``MASTERDOWN``): the connections may be stale, and one warning covers it
until Redis answers.

An **error reply** (``OOM``, ``NOPERM``, an unknown command, wrong
arguments, ``WRONGTYPE``, a script error, ...) comes from a live server over
a good connection. It means Redis cannot answer *that* decision; the next one
asks again on the same connection, and each cause is logged once per
incident (see :class:`~django_rl.backends.health.Health`).

Two more causes are neither, and are logged once per incident like error
replies: **no sentinel names the primary** (``MasterNotFoundError``, for a
new connection of a Sentinel-managed alias: the primary may be fine, and the
connections already open to it keep working), and, on a Redis Cluster, a
**slot that keeps moving** under a decision (``ASK`` and ``TRYAGAIN`` are
followed; ``migrating`` counts a decision that still met one after a few
tries); and a **pool with no free connection** for the socket timeout
(``PoolExhausted``, kind ``pool``: see ``RedisNode.client``; a full pool
alone is none of this, since threads beyond it share connections).

Every error has a **kind**, a short stable name under which the failed calls
are counted (``Health.errors``): outages are ``connection``, ``timeout``,
``loading``, ``busy``, ``readonly``, ``noreplicas``, ``cluster_down`` or
``other_outage``; the others are the names of :data:`REPLIES`.
"""

from __future__ import annotations

import logging
import re
from typing import NamedTuple

from redis.exceptions import (
    AskError,
    BusyLoadingError,
    ClusterDownError,
    NoPermissionError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.sentinel import MasterNotFoundError

from django_rl.backends.clock import ClockError
from django_rl.docs_urls import doc_url


class Reply(NamedTuple):
    """A cause of error replies: how loud its log line is, and what to do about it."""

    level: int
    #: What happened, in a few words (the line adds the server's message).
    cause: str
    #: What fixes it.
    fix: str


#: The causes of error replies, by kind. OOM is a WARNING (memory may free on
#: its own, as keys expire); the others need someone to change something.
REPLIES: dict[str, Reply] = {
    "oom": Reply(
        logging.WARNING,
        "is out of memory",
        "Raise its maxmemory or free memory",
    ),
    "noperm": Reply(
        logging.ERROR,
        "refuses a command to this connection's ACL user",
        "Grant the user the commands and keys django_rl uses "
        f"({doc_url('security', 'a-redis-user-of-its-own')} gives the rule)",
    ),
    "unknown_command": Reply(
        logging.ERROR,
        "does not know a command django_rl sends (renamed, disabled, or an older Redis)",
        "Enable the command (rename-command, or a managed Redis' disabled commands), "
        "or upgrade Redis",
    ),
    "wrong_arguments": Reply(
        logging.ERROR,
        "rejects the arguments of a command django_rl sends (an older Redis?)",
        "Upgrade Redis to a version that knows the command's options",
    ),
    "wrongtype": Reply(
        logging.ERROR,
        "holds a value of another type in a key django_rl uses",
        "Give django_rl a KEY_PREFIX no other program writes under, or delete those keys",
    ),
    "script": Reply(
        logging.ERROR,
        "fails to run a django_rl Lua script",
        "Check that scripting is enabled, and report the message as a bug of django_rl",
    ),
    "clock": Reply(
        logging.WARNING,
        "has a clock that kept jumping while a fixed-window hit looked for its window",
        "Check the server's time synchronisation (NTP)",
    ),
    "other_reply": Reply(
        logging.ERROR,
        "answers a command with an error",
        "Act on the server's message",
    ),
    "sentinel": Reply(
        logging.WARNING,
        "cannot be found by new connections: no sentinel names its primary",
        "Check that the sentinels of OPTIONS['SENTINELS'] run and can be reached; "
        "connections already open keep counting",
    ),
    "pool": Reply(
        logging.WARNING,
        "had no connection of this process' pool free for a whole socket timeout",
        "Raise the alias' OPTIONS['CONNECTION_POOL_KWARGS']['max_connections'] "
        "(redis-py's default is 100), or find what holds its connections that long "
        f"({doc_url('reliability', 'a-full-pool-is-not-an-outage')})",
    ),
    "migrating": Reply(
        logging.WARNING,
        "kept redirecting a decision while a slot moves between primaries (ASK, TRYAGAIN)",
        "If a reshard stopped half way, finish it: redis-cli --cluster fix",
    ),
}

#: Replies that say the server cannot serve anything now: outages, not error
#: replies. (A redirect, ``MOVED`` or ``ASK``, and ``TRYAGAIN`` are neither:
#: the cluster backend follows them.)
_OUTAGE_REPLIES = (ReadOnlyError, ClusterDownError, TryAgainError, AskError)
#: A primary with ``min-replicas-to-write`` that has fewer good replicas
#: refuses writes with this: after a forced failover, the old primary, whose
#: replica was promoted. Like ``READONLY``, the connections that reach it are
#: suspect: a new one may reach the new primary.
_NOREPLICAS = "NOREPLICAS"


#: How Redis 6.2 wraps the error of a command a script called:
#: ``Error running script (...): @user_script:80: @user_script: 80: -READONLY ...``
#: (Redis 7 replies with the command's own error). redis-py then raises a plain
#: ResponseError; the code inside says what it means.
_WRAPPED = re.compile(r"@user_script:\s*\d+:\s*-([A-Z]+)\b")
#: Codes that say the server cannot serve anything now, wrapped or not.
_OUTAGE_CODES = frozenset({"READONLY", "MASTERDOWN", "LOADING", "CLUSTERDOWN", "TRYAGAIN", "BUSY"})
_WRAPPED_KINDS = {"OOM": "oom", "NOPERM": "noperm", "WRONGTYPE": "wrongtype"}


def wrapped_code(exc: BaseException) -> str | None:
    """Return the error code a script's failed command answered (Redis 6.2), or ``None``."""
    if type(exc) is not ResponseError:
        return None
    match = _WRAPPED.search(str(exc))
    return match.group(1) if match is not None else None


def reply_kind(exc: BaseException) -> str | None:
    """Return the kind of an error reply of a live server, or ``None`` if ``exc`` is an outage."""
    if not isinstance(exc, ResponseError) or isinstance(exc, _OUTAGE_REPLIES):
        return None
    if isinstance(exc, ClockError):
        return "clock"
    if isinstance(exc, OutOfMemoryError):
        return "oom"
    if isinstance(exc, NoPermissionError):
        return "noperm"
    wrapped = wrapped_code(exc)
    if wrapped in _OUTAGE_CODES:
        return None
    if wrapped in _WRAPPED_KINDS:
        return _WRAPPED_KINDS[wrapped]
    message = str(exc)
    if message.startswith("BUSY ") or message.startswith(_NOREPLICAS):
        return None  # a script runs too long, or no write can be taken: outages
    if message.startswith("WRONGTYPE"):
        return "wrongtype"
    lowered = message.lower()
    # Checked before "script": a script's own call may be the one that failed
    # (Redis 7 words an ACL refusal inside a script as "The user executing
    # the script can't run this command").
    if "no permissions" in lowered or "can't run this command" in lowered:
        return "noperm"
    if "unknown command" in lowered or "unknown redis command" in lowered:
        return "unknown_command"
    if "wrong number of arg" in lowered or "syntax error" in lowered:
        return "wrong_arguments"
    if isinstance(exc, NoScriptError) or "script" in lowered:
        return "script"
    return "other_reply"


def outage_kind(exc: BaseException) -> str:
    """Return the kind of an outage error (one :func:`reply_kind` calls ``None``)."""
    if isinstance(exc, BusyLoadingError):  # a ConnectionError
        return "loading"
    if isinstance(exc, RedisConnectionError):
        return "connection"
    if isinstance(exc, RedisTimeoutError):
        return "timeout"
    if isinstance(exc, ResponseError) and str(exc).startswith(_NOREPLICAS):
        return "noreplicas"
    if makes_connections_stale(exc):
        return "readonly"
    if isinstance(exc, (ClusterDownError, TryAgainError)):
        return "cluster_down"
    wrapped = wrapped_code(exc)
    if wrapped == "LOADING":
        return "loading"
    if wrapped in ("MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN"):
        return "cluster_down" if wrapped != "MASTERDOWN" else "other_outage"
    if (isinstance(exc, ResponseError) and str(exc).startswith("BUSY ")) or wrapped == "BUSY":
        return "busy"
    if isinstance(exc, ResponseError) and str(exc).startswith(_NOREPLICAS):
        return "noreplicas"
    return "other_outage"


def makes_connections_stale(exc: BaseException) -> bool:
    """Return whether, after ``exc``, every connection to the server is as suspect as this one.

    The server is gone, hung, restarting, no longer the primary (``READONLY``)
    or cut off from its replicas (``NOREPLICAS``): new connections may reach
    another server (a restarted one, or a new primary behind the same address
    or named by Sentinel). ``READONLY`` also counts wrapped in a script's
    error (Redis 6.2), which redis-py raises as a plain ResponseError.
    """
    if isinstance(exc, (RedisConnectionError, RedisTimeoutError, ReadOnlyError)):
        return True
    return wrapped_code(exc) == "READONLY" or lacks_replicas(exc)


def lacks_replicas(exc: BaseException) -> bool:
    """Return whether ``exc`` is a primary's ``NOREPLICAS`` (``min-replicas-to-write`` unmet)."""
    return isinstance(exc, ResponseError) and str(exc).startswith(_NOREPLICAS)


def unlocated(exc: BaseException) -> bool:
    """Return whether ``exc`` says that no sentinel could name the primary (kind ``sentinel``)."""
    return isinstance(exc, MasterNotFoundError)


def brief(exc: BaseException, limit: int = 200) -> str:
    """Return ``exc``'s message for a log line: its first part, at most ``limit`` characters.

    redis-py's ``MasterNotFoundError`` lists every sentinel's client and
    error (thousands of characters): the line keeps what comes before that
    list, and the caller logs the whole message at DEBUG.
    """
    message = str(exc)
    if isinstance(exc, MasterNotFoundError):
        message = message.split(" : ", 1)[0]
    message = message.splitlines()[0] if message else message
    return message if len(message) <= limit else message[: limit - 3] + "..."
