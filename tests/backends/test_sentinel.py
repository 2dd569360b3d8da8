"""Sentinel through django-redis's SentinelClient, configured as docs/scaling.md advises."""

from __future__ import annotations

import time

import pytest
from django.core.cache import cache

from django_rl import get_policy
from tests.support.topologies import SENTINEL_SERVICE, wait_for

pytestmark = pytest.mark.topologies

TIMEOUT = 0.2
#: Decisions must reach the new primary within this long of the switch.
RECOVERY = 5.0
POLICIES = {"tb": {"algorithm": "token_bucket", "capacity": 5, "rate": "5/m", "key": "ip"}}


@pytest.fixture
def on_sentinel(settings, redis_sentinel):
    redis_sentinel.flush()
    settings.CACHES = redis_sentinel.caches(timeout=TIMEOUT)
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    return redis_sentinel


def test_the_django_cache_and_decisions_reach_the_primary(on_sentinel):
    cache.set("greeting", "hello", 60)
    assert get_policy("tb").hit("ip:192.0.2.1").remaining == 4
    primary = on_sentinel.client()
    assert primary.exists(get_policy("tb").key("ip:192.0.2.1")) == 1
    assert primary.get(":1:greeting") is not None


def test_a_dead_sentinel_costs_a_new_connection_no_more_than_a_timeout(on_sentinel, settings):
    # With SENTINEL_KWARGS as advised, the first sentinel refusing costs
    # nothing: the next one answers. (redis-py's default retries took 4 s here.)
    # Up to 3 tries, each on a new pool (a new connection, so the sentinels are
    # asked again): retries or a wait for the dead one make every try slow,
    # while a busy machine (the suite's parallel runs; 0.75 s once in CI) makes
    # one slow, not three.
    first = on_sentinel.sentinels[0]
    first.stop()
    took: list[float] = []
    try:
        for _ in range(3):
            settings.CACHES = on_sentinel.caches(timeout=TIMEOUT)  # a new pool
            started = time.monotonic()
            decision = get_policy("tb").hit("ip:192.0.2.2")
            took.append(time.monotonic() - started)
            assert not decision.degraded
            if took[-1] < TIMEOUT:
                break
    finally:
        first.start()
    assert min(took) < TIMEOUT, took


def test_after_a_failover_decisions_leave_the_demoted_primary_for_the_new_one(on_sentinel):
    # SENTINEL FAILOVER promotes the replica; the old primary, demoted (here
    # at once; Sentinel does it within 10 s, its INFO period for replicas),
    # closes its connections and answers READONLY on new ones. Sentinels that
    # have not heard of the switch yet (they gossip every 2 s) may still name
    # it, so a decision or two may fail (and follow fail_open); each failure
    # replaces the connections, and the next decision asks Sentinel again.
    policy = get_policy("tb")
    assert policy.hit("ip:192.0.2.3").remaining == 4
    old = on_sentinel.primary()
    sentinel = on_sentinel.sentinels[0].client()
    try:
        sentinel.execute_command("SENTINEL FAILOVER", SENTINEL_SERVICE)
    finally:
        sentinel.close()
    wait_for(lambda: on_sentinel.primary() is not old, 20, "the sentinels to switch primaries")
    switched = time.monotonic()
    demoted = old.client()
    try:
        demoted.replicaof("127.0.0.1", on_sentinel.primary_port())
    finally:
        demoted.close()
    while (decision := policy.hit("ip:192.0.2.3")).degraded:
        assert time.monotonic() - switched < RECOVERY, "decisions did not reach the new primary"
        time.sleep(0.05)
    assert decision.remaining == 3  # the count went on, on the new primary
    node = policy.backend.node_for("any")
    assert node.client.connection.port == on_sentinel.primary_port()
    on_sentinel.wait_healthy()
