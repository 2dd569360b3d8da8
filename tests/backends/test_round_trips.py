"""One round trip per decision on every topology: one write to a socket, the expected commands."""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_rl import get_policy
from tests.support import servers
from tests.support.counting import (
    CountingConnection,
    CountingSentinelConnection,
    CountingSSLConnection,
)

POLICIES = {
    "fixed_window": {"algorithm": "fixed_window", "rate": "1000/h"},
    "sliding_log": {"algorithm": "sliding_log", "rate": "1000/h"},
    "token_bucket": {"algorithm": "token_bucket", "capacity": 1000, "rate": "1000/h"},
    "quota": {"algorithm": "quota", "limit": 1000, "period": "day"},
}
# Commands per allowed hit, as INFO commandstats counts them: the client's
# own, and those the script calls (which Redis counts too).
COMMANDS = {
    "fixed_window": {"multi": 1, "incrby": 1, "pexpireat": 1, "pttl": 1, "exec": 1},
    # No entry leaves the window during the test, so no ZCOUNT and no
    # ZREMRANGEBYRANK; the two ZRANGEs read the oldest and the newest entry,
    # and a count needs no ZCARD.
    "sliding_log": {"evalsha": 1, "time": 1, "zrange": 2, "zadd": 1, "pexpire": 1},
    "token_bucket": {"evalsha": 1, "time": 1, "hmget": 1, "hset": 1, "pexpire": 1},
    # The counter of the period holding the server's time; its TTL set once, when made.
    "quota": {"evalsha": 1, "time": 1, "get": 1, "incrby": 1, "pttl": 1},
}
if servers.APP_CLOCK:
    # CLOCK "app": the time is this host's. No TIME in the scripts, and a
    # fixed window's expiry is relative (PEXPIRE), with nothing to read back.
    COMMANDS = {
        "fixed_window": {"multi": 1, "incrby": 1, "pexpire": 1, "exec": 1},
        **{
            name: {k: v for k, v in commands.items() if k != "time"}
            for name, commands in COMMANDS.items()
            if name != "fixed_window"
        },
    }
#: Commands the primaries get from the suite, replicas and sentinels, not from django_rl.
BACKGROUND = frozenset({"info", "replconf", "ping", "publish"})
#: Identities whose keys land on every primary of the test cluster.
IDENTITIES = [f"ip:10.1.0.{i}" for i in range(8)]


def command_calls(primaries) -> dict[str, int]:
    """Return the calls of each command, summed over every primary."""
    calls: dict[str, int] = {}
    for client in primaries:
        for name, stats in client.info("commandstats").items():
            command = name.removeprefix("cmdstat_")
            calls[command] = calls.get(command, 0) + int(stats["calls"])
    return calls


@pytest.mark.parametrize("name", list(POLICIES))
def test_each_hit_is_one_send_and_one_decision_worth_of_commands(topology, keyspace, name):
    counting: type = (
        CountingSentinelConnection if topology.name == "sentinel" else CountingConnection
    )
    if servers.TLS_MODE:
        counting = CountingSSLConnection
    caches = topology.caches(CONNECTION_POOL_KWARGS={"connection_class": counting})
    with override_settings(CACHES=caches, DJANGO_RL={"POLICIES": POLICIES}):
        policy = get_policy(name)
        for identity in IDENTITIES:
            # Connect, read the slot table, measure each node's clock, load
            # the script on each node.
            policy.hit(identity)
        primaries = topology.primaries()
        before_sends = CountingConnection.sends
        before = command_calls(primaries)
        for i in range(48):
            policy.hit(IDENTITIES[i % len(IDENTITIES)])
        sends = CountingConnection.sends - before_sends
        after = command_calls(primaries)
    # Each info call shows up once; so may what replicas and sentinels send
    # the primaries on their own (REPLCONF ACK and PING every second, PUBLISH
    # of a sentinel's hello every 2 s); nothing else may.
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    delta = {k: v for k, v in delta.items() if v and k not in BACKGROUND}
    assert (sends, delta) == (48, {k: 48 * v for k, v in COMMANDS[name].items()})
