"""One round trip per decision: one write to the socket, and the expected commands."""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_rl import get_policy
from tests.counting import CountingConnection
from tests.redis_server import caches_for

POLICIES = {
    "fixed_window": {"algorithm": "fixed_window", "rate": "1000/h"},
    "sliding_log": {"algorithm": "sliding_log", "rate": "1000/h"},
    "token_bucket": {"algorithm": "token_bucket", "capacity": 1000, "rate": "1000/h"},
}
# Commands per allowed hit, as INFO commandstats counts them: the client's
# own, and those the script calls (which Redis counts too).
COMMANDS = {
    "fixed_window": {"multi": 1, "incrby": 1, "pexpireat": 1, "pttl": 1, "exec": 1},
    "sliding_log": {
        "evalsha": 1,
        "time": 1,
        "zremrangebyscore": 1,
        "zcard": 1,
        "zadd": 1,
        "zrange": 1,
        "pexpire": 1,
    },
    "token_bucket": {"evalsha": 1, "time": 1, "hmget": 1, "hset": 1, "pexpire": 1},
}


def command_calls(client) -> dict[str, int]:
    return {
        name.removeprefix("cmdstat_"): int(stats["calls"])
        for name, stats in client.info("commandstats").items()
    }


@pytest.mark.parametrize("name", list(POLICIES))
def test_each_hit_is_one_send_and_one_decision_worth_of_commands(redis_server, redis_client, name):
    # Database 2: its own URL, so django-redis builds a pool with this class.
    url = redis_server.url.removesuffix("/0") + "/2"
    caches = caches_for(url, CONNECTION_POOL_KWARGS={"connection_class": CountingConnection})
    with override_settings(CACHES=caches, DJANGO_RL={"POLICIES": POLICIES}):
        policy = get_policy(name)
        policy.hit("ip:warm-up")  # connect, measure the clock, load the script
        before_sends = CountingConnection.sends
        before = command_calls(redis_client)
        for i in range(50):
            policy.hit(f"ip:10.1.0.{i % 4}")
        sends = CountingConnection.sends - before_sends
        after = command_calls(redis_client)
    assert sends == 50
    # The info call itself shows up once; nothing else may.
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    delta = {k: v for k, v in delta.items() if v and k != "info"}
    assert delta == {k: 50 * v for k, v in COMMANDS[name].items()}
