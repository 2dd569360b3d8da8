"""Sentinel through django-redis's SentinelClient, configured as docs/scaling.md advises."""

from __future__ import annotations

import time

import pytest
from django.core.cache import cache

from django_rl import get_policy

pytestmark = pytest.mark.topologies

TIMEOUT = 0.2
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


def test_a_dead_sentinel_costs_a_new_connection_no_more_than_a_timeout(on_sentinel):
    # With SENTINEL_KWARGS as advised, the first sentinel refusing costs
    # nothing: the next one answers. (redis-py's default retries took 4 s here.)
    first = on_sentinel.sentinels[0]
    first.stop()
    try:
        started = time.monotonic()
        decision = get_policy("tb").hit("ip:192.0.2.2")  # a new pool: a new connection
        took = time.monotonic() - started
    finally:
        first.start()
    assert not decision.degraded
    assert took < TIMEOUT
