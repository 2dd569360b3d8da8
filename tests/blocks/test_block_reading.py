"""block() on a policy without block_for or escalate: its decisions read blocks from then on.

Here at once; in other processes within about a second (the mark, read by
the loader's thread): ``policies/block_reading.py``.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time

import pytest
from django.test import override_settings

import django_rl
from django_rl import get_policy
from django_rl.algorithms.blocking import Blocking
from django_rl.policies import block_reading
from django_rl.signals import identity_blocked
from tests.conftest import server_ms, start_of_fresh_window
from tests.support.redis_server import caches_for

ALGORITHMS = {
    "fixed_window": {"algorithm": "fixed_window", "rate": "3/h"},
    "sliding_log": {"algorithm": "sliding_log", "rate": "3/h"},
    "token_bucket": {"algorithm": "token_bucket", "capacity": 3, "rate": "3/h"},
    "gcra": {"algorithm": "gcra", "burst": 3, "rate": "3/h"},
    "sliding_window": {"algorithm": "sliding_window", "rate": "3/h"},
}
ID = "ip:192.0.2.70"
OTHER = "ip:192.0.2.71"


@pytest.fixture(params=list(ALGORITHMS))
def policy(request, settings, redis_client):
    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=120_000)
    settings.DJANGO_RL = {
        "POLICIES": {"p": {**ALGORITHMS[request.param], "key": "ip"}},
        "DENY_CACHE_SIZE": 0,
    }
    return get_policy("p")


def reads_blocks(policy) -> bool:
    return isinstance(policy.algorithm, Blocking)


def test_a_plain_policy_reads_no_blocks_until_one_is_set(policy):
    assert policy.hit(ID).allowed
    assert not reads_blocks(policy) and not policy.reads_blocks


def test_block_denies_without_counting_and_unblock_ends_it(policy):
    assert policy.hit(ID).allowed  # one of 3 used
    decision = django_rl.block("p", ID, 120)
    assert not decision.allowed and 119 <= decision.retry_after <= 120
    assert reads_blocks(policy)
    for _ in range(4):
        denied = policy.hit(ID)
        assert not denied.allowed and 118 <= denied.retry_after <= 120
        assert denied.retry_after_header in (119, 120)
    peeked = policy.peek(ID)
    assert not peeked.allowed and peeked.retry_after > 118
    assert policy.hit(OTHER).allowed  # another identity is not blocked
    assert django_rl.unblock("p", ID) is True
    assert django_rl.unblock("p", ID) is False
    # The blocked hits counted nothing: 2 of 3 left.
    assert [policy.hit(ID).allowed for _ in range(3)] == [True, True, False]


def test_async_decisions_read_the_block(policy):
    policy.block(ID, 60)

    async def hits():
        return [await policy.ahit(ID) for _ in range(2)]

    assert [d.allowed for d in asyncio.run(hits())] == [False, False]


def test_a_block_is_sent_once_and_never_starts_one_of_its_own(policy, redis_client):
    sent = []

    def receiver(sender, **kwargs):
        sent.append((kwargs["policy"], kwargs["identity"], kwargs["seconds"]))

    identity_blocked.connect(receiver)
    try:
        policy.block(ID, 30)
        assert [policy.hit(OTHER).allowed for _ in range(5)] == [True] * 3 + [False] * 2
    finally:
        identity_blocked.disconnect(receiver)
    assert sent == [("p", ID, 30.0)]  # OTHER's denials block nothing: the policy has no block_for
    assert redis_client.exists(policy.key(OTHER) + ":b") == 0


def test_one_round_trip_each_with_the_mark(policy, redis_client):
    policy.peek("ip:warm")
    policy.block("ip:warm", 10)
    # Its script with blocks loaded (a new server answers its first EVALSHA with
    # NOSCRIPT, then EVAL: a second round trip, once per server), as earlier
    # tests of a session leave it.
    policy.hit("ip:warm")
    # (unblock also writes the reset token, as reset does: not here.)
    for call in (lambda: policy.block(ID, 30), lambda: policy.hit(ID), lambda: policy.hit(ID)):
        before = int(redis_client.info("stats")["total_reads_processed"])
        call()
        assert int(redis_client.info("stats")["total_reads_processed"]) - before == 2


def test_the_mark_keeps_the_latest_end_and_has_a_ttl(policy, redis_client):
    now = server_ms(redis_client)
    policy.block(ID, 300)
    policy.block(OTHER, 100)  # shorter: the mark keeps the later end
    key = block_reading.mark_key("rl")
    ends = int(redis_client.hget(key, "p"))
    assert now + 300_000 <= ends <= server_ms(redis_client) + 300_000
    ttl = redis_client.pttl(key)
    assert 300_000 < ttl <= 300_000 + block_reading.SLACK_S * 1000


def test_a_policy_built_elsewhere_reads_blocks_once_it_polls(policy, settings):
    policy.block(ID, 120)
    block_reading.forget()  # another process: it knows no mark, and builds its policy
    settings.DJANGO_RL = {**settings.DJANGO_RL, "FAIL_OPEN": True}
    other = get_policy("p")
    assert other is not policy and not reads_blocks(other)
    assert other.hit(ID).allowed  # (not reading blocks yet: what the second's lag allows)
    block_reading.poll()
    assert reads_blocks(other)
    assert not other.hit(ID).allowed
    # A policy built while the mark is in force reads blocks from the start.
    settings.DJANGO_RL = {**settings.DJANGO_RL, "FAIL_OPEN": False}
    assert reads_blocks(get_policy("p"))


def test_unblock_sees_a_block_this_process_never_read(policy, settings):
    policy.block(ID, 120)
    block_reading.forget()
    settings.DJANGO_RL = {**settings.DJANGO_RL, "FAIL_OPEN": True}
    other = get_policy("p")
    assert not reads_blocks(other)
    assert other.unblock(ID) is True
    assert other.unblock(ID) is False


def test_a_view_of_a_plain_policy_answers_429_while_blocked(settings, client, redis_client):
    start_of_fresh_window(redis_client, 60_000, min_left_ms=20_000)
    settings.DJANGO_RL = {
        "POLICIES": {"per_minute": {"algorithm": "fixed_window", "rate": "100/m", "key": "ip"}},
        "DENY_CACHE_SIZE": 0,
    }
    settings.ROOT_URLCONF = "tests.sites.urls"
    ip = "10.9.8.7"
    assert client.get("/limited/", REMOTE_ADDR=ip).status_code == 200
    django_rl.block("per_minute", f"ip:{ip}", 90)
    response = client.get("/limited/", REMOTE_ADDR=ip)
    assert response.status_code == 429
    assert response["Retry-After"] in ("89", "90")
    assert client.get("/limited/", REMOTE_ADDR="10.9.8.6").status_code == 200
    django_rl.unblock("per_minute", f"ip:{ip}")
    assert client.get("/limited/", REMOTE_ADDR=ip).status_code == 200


def test_rate_overrides_and_plans_read_blocks_too(settings, redis_client):
    settings.DJANGO_RL = {
        "POLICIES": {
            "plans": {
                "algorithm": "sliding_window",
                "rate": "tests.blocks.test_block_reading.plan_rate",
                "key": "ip",
            }
        },
        "DENY_CACHE_SIZE": 0,
    }
    policy = get_policy("plans")
    request = type("Request", (), {"plan": "5/h"})()
    assert policy.hit(ID, request=request).allowed
    policy.read_blocks()
    assert all(isinstance(v.algorithm, Blocking) for v in policy.variants())
    later = policy.variant_for(type("Request", (), {"plan": "7/h"})())
    assert isinstance(later.algorithm, Blocking)


def plan_rate(request):
    return request.plan


def test_another_process_reads_the_block_within_about_a_second(redis_server, redis_client):
    """A worker deciding in a loop (its loader thread on, overrides off) is denied soon after."""
    from tests.blocks.points_workers import hit_until_denied

    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=120_000)
    policies = {"p": {"algorithm": "fixed_window", "rate": "1000/h", "key": "ip"}}
    context = multiprocessing.get_context("spawn")
    ready, results = context.Event(), context.Queue()
    child = context.Process(
        target=hit_until_denied, args=(redis_server.url, policies, ID, ready, results)
    )
    child.start()
    try:
        assert ready.wait(60)
        time.sleep(0.3)  # the worker decides on, its policy reading no blocks
        with override_settings(
            CACHES=caches_for(redis_server.url), DJANGO_RL={"POLICIES": policies}
        ):
            blocked_at = time.monotonic()
            django_rl.block("p", ID, 60)
        allowed, denied_at, thread_ran = results.get(timeout=30)
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()
    assert thread_ran and denied_at is not None
    # The thread reads the mark once a second, off the decision path (margin for a busy box).
    assert 0 <= denied_at - blocked_at <= 2.5
    assert allowed >= 3


def test_redis_down_a_plain_policys_block_is_degraded_never_an_exception(settings):
    from tests.support.redis_server import free_port

    settings.DJANGO_RL = {
        "POLICIES": {"p": {**ALGORITHMS["fixed_window"], "key": "ip"}},
        "FAIL_OPEN": False,
    }
    with override_settings(CACHES=caches_for(f"redis://127.0.0.1:{free_port()}/0")):
        decision = django_rl.block("p", ID, 10)
        assert decision.degraded and not decision.allowed
        assert django_rl.unblock("p", ID) is False
        assert get_policy("p").hit(ID).degraded
