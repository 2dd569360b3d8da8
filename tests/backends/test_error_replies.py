"""Error replies of a live server: no outage, the connection kept, one line per cause and incident.

A server that answers a decision's command with an error (OOM, NOPERM, an
unknown command, wrong arguments, WRONGTYPE, a script error) is alive, and
the connection that carried the error is good: the decision follows
fail_open, the next one asks Redis again on the same connection, and the
cause is logged once, naming what to fix. (tests/backends/test_oom.py puts OOM under
load.)
"""

from __future__ import annotations

import logging
import re

import pytest
import redis
from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    MovedError,
    NoPermissionError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)

from django_rl import get_policy
from django_rl.backends import get_backend
from django_rl.backends.errors import REPLIES, outage_kind, reply_kind
from tests.conftest import FAULT_TIMEOUT
from tests.support.redis_server import caches_for

POLICIES = {
    "window": {"algorithm": "fixed_window", "rate": "5/m", "key": "ip"},
    "log": {"algorithm": "sliding_log", "rate": "5/m", "key": "ip", "fail_open": False},
    "bucket": {"algorithm": "token_bucket", "capacity": 5, "rate": "5/m", "key": "ip"},
}
FAIL_OPEN = {"window": True, "log": False, "bucket": True}


@pytest.fixture
def log(caplog):
    caplog.set_level(logging.INFO, logger="django_rl")
    return caplog


def lines(log) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in log.records if r.name == "django_rl"]


def line_of(kind: str, name: str, error: str) -> str:
    """Return the pattern of the one line a cause logs per incident (``error`` a pattern)."""
    reply = REPLIES[kind]
    return (
        rf"Redis for rate limiting \({re.escape(name)}\) {re.escape(reply.cause)} \({error}\); "
        r"decisions it cannot answer follow fail_open, and each asks it again\. "
        rf"{re.escape(reply.fix)}\. Logged once per incident: until a call succeeds 1 s or "
        r"more after the last such error\."
    )


def test_wrongtype_is_one_error_line_not_an_outage(settings, redis_client, log):
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    policies = {name: get_policy(name) for name in POLICIES}
    backend = get_backend("default")
    for policy in policies.values():
        # Another program wrote the bad identity's keys (every window's) as lists.
        for key in policy.algorithm.keys(backend, policy.key("ip:192.0.2.66")):
            redis_client.rpush(key, "someone else")
    connection = backend.client.client_id()
    rounds = []
    for _ in range(3):
        for name, policy in policies.items():
            bad, good = policy.hit("ip:192.0.2.66"), policy.hit("ip:192.0.2.1")
            rounds.append((name, (bad.allowed, bad.degraded), (good.remaining, good.degraded)))
    assert rounds == [
        (name, (FAIL_OPEN[name], True), (remaining, False))
        for remaining in (4, 3, 2)
        for name in POLICIES
    ]
    ((level, message),) = lines(log)
    assert level == "ERROR"
    assert re.fullmatch(
        line_of("wrongtype", "CACHES['default']", "ResponseError: WRONGTYPE Operation .*"),
        message,
    )
    assert (dict(backend.health.errors), backend.health.outages) == ({"wrongtype": 9}, 0)
    assert backend.client.client_id() == connection


def acl_user_without_scripting(server) -> str:
    """Add a user who may not run scripts; return the URL that connects as that user."""
    admin = server.client()
    try:
        admin.acl_setuser(
            "limiter", enabled=True, passwords=["+secret"], keys=["*"],
            commands=["+@all", "-@scripting"],
        )  # fmt: skip
    finally:
        admin.close()
    return f"redis://limiter:secret@127.0.0.1:{server.port}/0?client_name=django_rl_acl"


def evalsha_disabled(server) -> str:
    """Restart the server with EVALSHA disabled (as some hosted Redis do); return its URL."""
    server.restart(extra_args=["--rename-command", "EVALSHA", ""])
    return f"{server.url}?client_name=django_rl_renamed"


@pytest.mark.parametrize(
    ("kind", "setup", "error"),
    [
        (
            "noperm",
            acl_user_without_scripting,
            r"NoPermissionError: this user has no permissions to run the 'evalsha' command",
        ),
        ("unknown_command", evalsha_disabled, r"ResponseError: unknown command 'EVALSHA'.*"),
    ],
)
def test_a_server_that_refuses_scripts_fails_only_the_scripted_policies(
    settings, private_redis, log, kind, setup, error
):
    url = setup(private_redis)
    timeouts = {"SOCKET_CONNECT_TIMEOUT": FAULT_TIMEOUT, "SOCKET_TIMEOUT": FAULT_TIMEOUT}
    settings.CACHES = caches_for(url, **timeouts)
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    policies = {name: get_policy(name) for name in POLICIES}
    backend = get_backend("default")
    connection = backend.client.client_id()
    decisions = {
        name: [(d.allowed, d.remaining, d.degraded) for d in (p.hit("ip:1") for _ in range(3))]
        for name, p in policies.items()
    }
    # The MULTI/EXEC of the fixed window needs no script: it counts.
    assert decisions == {
        "window": [(True, 4, False), (True, 3, False), (True, 2, False)],
        "log": [(False, 0, True)] * 3,
        "bucket": [(True, 5, True)] * 3,
    }
    ((level, message),) = lines(log)
    assert level == "ERROR"
    assert re.fullmatch(line_of(kind, "CACHES['default']", error), message)
    assert (dict(backend.health.errors), backend.health.outages) == ({kind: 6}, 0)
    assert backend.client.client_id() == connection


# Messages as Redis 7.0 words them (redis-py strips the code of those it has a class for).
ERROR_REPLIES = [
    ("oom", OutOfMemoryError("command not allowed when used memory > 'maxmemory'.")),
    ("noperm", NoPermissionError("this user has no permissions to run the 'zadd' command")),
    ("unknown_command", ResponseError("unknown command 'evalsha', with args beginning with: ")),
    (
        "unknown_command",
        ResponseError("Unknown Redis command called from script script: 7ae0, on @user_script:1."),
    ),
    ("wrong_arguments", ResponseError("wrong number of arguments for 'get' command")),
    ("wrong_arguments", ResponseError("syntax error")),
    ("wrongtype", ResponseError("WRONGTYPE Operation against a key holding the wrong kind")),
    ("script", ResponseError("user_script:1: attempt to compare nil with number script: 44")),
    ("script", NoScriptError("No matching script. Please use EVAL.")),
    ("other_reply", ResponseError("value is not an integer or out of range")),
    ("other_reply", ResponseError("MISCONF Redis is configured to save RDB snapshots, but ...")),
]
OUTAGES = [
    ("connection", redis.ConnectionError("Error 111 connecting to 127.0.0.1:1. Refused.")),
    ("timeout", redis.TimeoutError("Timeout reading from socket")),
    ("loading", BusyLoadingError("Redis is loading the dataset in memory")),
    ("busy", ResponseError("BUSY Redis is busy running a script. You can only call SCRIPT KILL")),
    ("readonly", ReadOnlyError("You can't write against a read only replica.")),
    # min-replicas-to-write unmet: after a forced failover, the old primary.
    ("noreplicas", ResponseError("NOREPLICAS Not enough good replicas to write.")),
    ("cluster_down", ClusterDownError("The cluster is down")),
    ("cluster_down", TryAgainError("Multiple keys request during rehashing of slot")),
]


@pytest.mark.parametrize(("kind", "error"), ERROR_REPLIES)
def test_error_replies_are_told_by_their_cause(kind, error):
    assert (reply_kind(error), kind in REPLIES) == (kind, True)


@pytest.mark.parametrize(("kind", "error"), OUTAGES)
def test_replies_that_say_nothing_can_be_served_are_outages(kind, error):
    assert (reply_kind(error), outage_kind(error)) == (None, kind)


def test_a_redirect_is_neither():
    assert reply_kind(MovedError("3999 127.0.0.1:6381")) is None
