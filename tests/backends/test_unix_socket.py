"""A Redis reached over a Unix socket (``unix://`` in ``LOCATION``), as a co-located one often is.

Every algorithm, both front doors and both drop-ins decide on it exactly,
in one round trip, through the kept connection; when the server goes away
``fail_open`` decides, and once it is back the counts are Redis's again.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client, RequestFactory

from django_rl import get_policy
from tests.conftest import start_of_fresh_window
from tests.support.redis_server import RedisServer, caches_for

pytestmark = pytest.mark.skipif(
    os.environ.get("DJANGO_RL_TEST_MODE", "") not in ("", "default"),
    reason="the ACL, TLS and app-clock modes are for TCP servers",
)

POLICIES = {
    "fixed_window": {"algorithm": "fixed_window", "rate": "3/h", "key": "ip"},
    "sliding_log": {"algorithm": "sliding_log", "rate": "3/h", "key": "ip"},
    "token_bucket": {"algorithm": "token_bucket", "capacity": 3, "rate": "3/h", "key": "ip"},
    "gcra": {"algorithm": "gcra", "rate": "3/h", "burst": 3, "key": "ip"},
    "sliding_window": {"algorithm": "sliding_window", "rate": "3/h", "key": "ip"},
    "concurrency": {"algorithm": "concurrency", "limit": 3, "timeout": 60, "key": "ip"},
}


@pytest.fixture
def unix_redis(settings: Any) -> Iterator[tuple[RedisServer, str]]:
    """A redis-server of this test's own, listening on a Unix socket too; CACHES use the socket."""
    server = RedisServer()
    path = os.path.join(server.directory, "redis.sock")
    server.start(extra_args=["--unixsocket", path, "--unixsocketperm", "700"])
    settings.CACHES = caches_for(f"unix://{path}?db=0&client_name=django_rl_unix")
    settings.DJANGO_RL = {
        **settings.DJANGO_RL,
        "POLICIES": {**settings.DJANGO_RL["POLICIES"], **POLICIES},
    }
    client = server.client()
    try:
        # No test's hits straddle the end of an hour's window on the server's clock.
        start_of_fresh_window(client, 3_600_000, min_left_ms=5_000)
    finally:
        client.close()
    try:
        yield server, path
    finally:
        server.close()


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_algorithm_decides_exactly_over_a_unix_socket(unix_redis, name):
    server, path = unix_redis
    policy = get_policy(name)
    decisions = [policy.hit("ip:192.0.2.1") for _ in range(4)]
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert [d.remaining for d in decisions] == [2, 1, 0, 0]
    assert not any(d.degraded for d in decisions)
    assert policy.peek("ip:192.0.2.1").remaining == 0
    assert policy.hit("ip:192.0.2.2").remaining == 2  # another identity, its own count
    client = server.client()
    try:
        # Every key on the server came over the socket, each with a TTL.
        keys = client.keys("rl:*")
        assert keys and all(client.pttl(key) > 0 for key in keys)
        clients = client.client_list()
    finally:
        client.close()
    assert any(c.get("name") == "django_rl_unix" and c["addr"].startswith(path) for c in clients)


def test_the_kept_connection_makes_one_round_trip_per_decision(unix_redis):
    server, _ = unix_redis
    policy = get_policy("sliding_log")
    policy.hit("ip:192.0.2.3")  # connects, loads the script
    client = server.client()
    try:
        before = int(client.info("stats")["total_reads_processed"])
        for _ in range(2):
            policy.hit("ip:192.0.2.3")
        after = int(client.info("stats")["total_reads_processed"])
    finally:
        client.close()
    assert after - before == 2 + 1  # one read per decision, and the second INFO's


def test_both_front_doors_and_the_drop_ins_over_a_unix_socket(unix_redis):
    from django_rl.contrib.drf import AnonRateThrottle
    from django_rl.contrib.ratelimit.core import get_usage

    assert [Client().get("/limited/").status_code for _ in range(6)] == [200] * 5 + [429]

    class Throttle(AnonRateThrottle):
        rate = "2/min"
        scope = "unix"

    request = RequestFactory().get("/", REMOTE_ADDR="198.51.100.7")
    request.user = None
    assert [Throttle().allow_request(request, None) for _ in range(3)] == [True, True, False]
    counts = [
        get_usage(request, group="unix", key="ip", rate="2/h", increment=True)["count"]
        for _ in range(3)
    ]
    assert counts == [1, 2, 3]


def test_a_socket_that_goes_away_follows_fail_open_then_counts_again(unix_redis):
    server, _ = unix_redis
    policy = get_policy("fixed_window")
    assert policy.hit("ip:192.0.2.4").remaining == 2
    server.stop()
    down = policy.hit("ip:192.0.2.4")
    assert (down.allowed, down.degraded) == (True, True)
    server.start(port=server.port, extra_args=server.extra_args)
    back = [policy.hit("ip:192.0.2.4") for _ in range(4)]
    # The restarted server lost its counts (no persistence): 3 fit again.
    assert [d.allowed for d in back] == [True, True, True, False]
    assert not any(d.degraded for d in back)


def test_the_checks_accept_a_unix_socket_location(unix_redis):
    from django.core.checks import run_checks

    problems = [m for m in run_checks(include_deployment_checks=False) if "django_rl" in m.id]
    assert problems == []
