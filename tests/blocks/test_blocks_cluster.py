"""Blocks on a Redis Cluster: one identity's state and block share its slot; several slots
of one request decided by reserve and refund (refund.lua takes back a '+' segment too)."""

from __future__ import annotations

import pytest
from django.test import override_settings

import django_rl
from django_rl import get_policy, hit_many

POLICIES = {
    "p": {"algorithm": "sliding_log", "rate": "5/h", "key": "ip", "block_for": "1h"},
    "q": {"algorithm": "gcra", "burst": 1, "rate": "1/h", "key": "ip", "block_for": "1h"},
}


@pytest.fixture
def cluster(redis_cluster):
    with override_settings(
        CACHES=redis_cluster.caches(), DJANGO_RL={"POLICIES": POLICIES, "DENY_CACHE_SIZE": 0}
    ):
        redis_cluster.flush()
        yield redis_cluster
        redis_cluster.flush()


def across(first: str, second: str) -> bool:
    backend = get_policy("p").backend
    return backend.slot_of(get_policy("p").key(first)) != backend.slot_of(
        get_policy("q").key(second)
    )


@pytest.mark.topologies
def test_blocks_and_points_on_a_cluster(cluster):
    policy = get_policy("p")
    for _ in range(5):
        assert policy.hit("ip:10.0.0.1").allowed
    denied = policy.hit("ip:10.0.0.1")
    assert not denied.allowed and denied.retry_after > 3_590
    assert django_rl.unblock("p", "ip:10.0.0.1") is True
    assert policy.reward("ip:10.0.0.1", 5).remaining == 5
    assert policy.penalize("ip:10.0.0.1", 2).remaining == 3


@pytest.mark.topologies
def test_a_request_across_slots_is_all_or_nothing_with_blocks(cluster):
    a, b = "ip:10.0.0.2", "ip:10.0.1.3"
    assert across(a, b)
    assert get_policy("q").hit(b).allowed
    # q denies b (and starts b's block): p's count of a, if made first, is taken back.
    decisions = hit_many([("p", a, 1), ("q", b, 1)])
    assert decisions[0].allowed and not decisions[1].allowed
    assert decisions[1].retry_after > 3_590
    assert get_policy("p").peek(a).remaining == 5
    # a blocked under p: q's count of another identity is not kept.
    get_policy("p").block(a, 600)
    c = "ip:10.0.2.4"
    decisions = hit_many([("p", a, 1), ("q", c, 1)])
    assert not decisions[0].allowed and 590 < decisions[0].retry_after <= 600
    assert get_policy("q").peek(c).remaining == 1


@pytest.mark.topologies
def test_block_on_a_plain_policy_marks_it_on_the_marks_own_node(cluster):
    from django_rl.policies import block_reading

    with override_settings(
        DJANGO_RL={
            "POLICIES": {"plain": {"algorithm": "fixed_window", "rate": "5/h", "key": "ip"}},
            "DENY_CACHE_SIZE": 0,
        }
    ):
        plain = get_policy("plain")
        assert plain.hit("ip:10.0.3.1").allowed
        assert not plain.block("ip:10.0.3.1", 120).allowed
        assert not plain.hit("ip:10.0.3.1").allowed
        # (The topology's shared client: never closed here.)
        assert cluster.client().hget(block_reading.mark_key("rl"), "plain") is not None
        block_reading.forget()
        with override_settings(DJANGO_RL={**plain_settings(), "FAIL_OPEN": True}):
            other = get_policy("plain")
            assert other.hit("ip:10.0.3.1").allowed  # (before it reads the mark)
            block_reading.poll()
            assert not other.hit("ip:10.0.3.1").allowed


def plain_settings():
    return {
        "POLICIES": {"plain": {"algorithm": "fixed_window", "rate": "5/h", "key": "ip"}},
        "DENY_CACHE_SIZE": 0,
    }
