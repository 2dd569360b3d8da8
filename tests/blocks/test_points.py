"""penalize, reward, block, unblock: one round trip each, exact, every algorithm but concurrency."""

from __future__ import annotations

import threading

import pytest
from django.test import override_settings

import django_rl
from django_rl import get_policy
from tests.conftest import start_of_fresh_window
from tests.support.redis_server import caches_for, free_port

ALGORITHMS = {
    "fixed_window": {"algorithm": "fixed_window", "rate": "10/h"},
    "sliding_log": {"algorithm": "sliding_log", "rate": "10/h"},
    "token_bucket": {"algorithm": "token_bucket", "capacity": 10, "rate": "10/h"},
    "gcra": {"algorithm": "gcra", "burst": 10, "rate": "10/h"},
    "sliding_window": {"algorithm": "sliding_window", "rate": "10/h"},
}
ID = "ip:192.0.2.60"


@pytest.fixture(params=list(ALGORITHMS))
def policy(request, settings, redis_client):
    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=120_000)
    settings.DJANGO_RL = {
        "POLICIES": {
            "p": {**ALGORITHMS[request.param], "key": "ip"},
            "b": {**ALGORITHMS[request.param], "key": "ip", "block_for": "1h"},
            "c": {"algorithm": "concurrency", "limit": 2, "timeout": 30, "key": "ip"},
        }
    }
    return get_policy("p")


def test_penalize_counts_points_and_reports_the_state_after(policy):
    assert policy.penalize(ID, 3).remaining == 7
    assert policy.peek(ID).remaining == 7
    assert policy.hit(ID).remaining == 6
    assert django_rl.penalize("p", ID, 2).remaining == 4


def test_penalize_may_pass_the_limit_and_the_next_hits_are_denied(policy):
    decision = policy.penalize(ID, 12)
    assert not decision.allowed and decision.remaining == 0 and decision.retry_after > 0
    assert not policy.hit(ID).allowed


def test_reward_gives_back_never_emptier_than_fresh(policy):
    for _ in range(4):
        policy.hit(ID)
    assert policy.reward(ID, 3).remaining == 9
    assert django_rl.reward(policy, ID, 100).remaining == 10
    assert policy.peek(ID).remaining == 10
    assert [policy.hit(ID).allowed for _ in range(11)] == [True] * 10 + [False]


def test_reward_lets_a_denied_identity_through_at_once(policy):
    policy.penalize(ID, 10)
    assert not policy.hit(ID).allowed
    assert not policy.hit(ID).allowed  # remembered by the deny cache
    # (A fixed window counted the denied hits too: 12 points.)
    policy.reward(ID, 3)
    assert policy.hit(ID).allowed


def test_sliding_log_reward_splits_the_newest_entry(settings, redis_client):
    settings.DJANGO_RL = {"POLICIES": {"p": {"algorithm": "sliding_log", "rate": "10/h"}}}
    policy = get_policy("p")
    policy.hit(ID, 2)
    policy.penalize(ID, 5)
    assert policy.reward(ID, 6).remaining == 9  # 5 taken from the penalty, 1 from the hit
    assert policy.reward(ID, 1).remaining == 10


def test_token_bucket_may_go_negative(settings):
    settings.DJANGO_RL = {
        "POLICIES": {"p": {"algorithm": "token_bucket", "capacity": 2, "rate": "1/s"}}
    }
    policy = get_policy("p")
    decision = policy.penalize(ID, 5)  # 2 - 5 = -3 tokens: 4 s until one is back
    assert not decision.allowed and 3.9 <= decision.retry_after <= 4.0


def test_gcra_penalty_moves_the_tat(settings):
    settings.DJANGO_RL = {"POLICIES": {"p": {"algorithm": "gcra", "burst": 2, "rate": "1/s"}}}
    policy = get_policy("p")
    decision = policy.penalize(ID, 5)  # TAT = now + 5 s; burst 2: next hit in 4 s
    assert not decision.allowed and 3.9 <= decision.retry_after <= 4.0
    assert policy.reward(ID, 100).remaining == 2


def test_block_and_unblock_on_a_policy_with_blocks(policy, settings):
    blocking = get_policy("b")
    decision = django_rl.block("b", ID, 120)
    assert not decision.allowed and 119 <= decision.retry_after <= 120
    assert not blocking.hit(ID).allowed
    assert django_rl.unblock("b", ID) is True
    assert django_rl.unblock(blocking, ID) is False
    assert blocking.hit(ID).allowed


@pytest.mark.parametrize("points", [0, -1])
def test_points_below_one(policy, points):
    with pytest.raises(ValueError):
        policy.penalize(ID, points)
    with pytest.raises(ValueError):
        policy.reward(ID, points)


@pytest.mark.parametrize("points", [True, 1.0, "1", None])
def test_points_not_an_int(policy, points):
    with pytest.raises(TypeError):
        policy.penalize(ID, points)
    with pytest.raises(TypeError):
        django_rl.reward("p", ID, points)


def test_concurrency_policies_refuse_all_four(policy):
    for call in (
        lambda: django_rl.penalize("c", ID),
        lambda: django_rl.reward("c", ID),
        lambda: django_rl.block("c", ID, 10),
        lambda: django_rl.unblock("c", ID),
    ):
        with pytest.raises(TypeError):
            call()


def test_one_round_trip_each(policy, redis_client):
    blocking = get_policy("b")
    blocking.peek("ip:warm")
    policy.penalize("ip:warm")
    blocking.penalize("ip:warm")
    for call in (
        lambda: policy.penalize(ID, 2),
        lambda: blocking.penalize(ID, 2),
        lambda: blocking.block(ID, 30),
    ):
        before = int(redis_client.info("stats")["total_reads_processed"])
        call()
        assert int(redis_client.info("stats")["total_reads_processed"]) - before == 2


def test_exact_under_32_concurrent_callers(policy):
    policy.penalize(ID, 1_000)  # far past the limit: every penalty and reward counts

    def work(n):
        for _ in range(5):
            policy.penalize(ID, 3)
            policy.reward(ID, 1)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # 1000 + 32 * 5 * 2 = 1320 points; the state is read back by giving all but 5 back.
    assert policy.reward(ID, 1_320 - 5).remaining == 5


def test_redis_down_is_degraded_never_an_exception(settings, policy):
    settings.DJANGO_RL = {
        "POLICIES": {
            "p": {**ALGORITHMS["sliding_log"], "key": "ip"},
            "b": {**ALGORITHMS["sliding_log"], "key": "ip", "block_for": "1h"},
        },
        "FAIL_OPEN": False,
    }
    with override_settings(CACHES=caches_for(f"redis://127.0.0.1:{free_port()}/0")):
        assert django_rl.penalize("p", ID).degraded
        assert django_rl.reward("p", ID).degraded
        assert django_rl.block("b", ID, 10).degraded
        assert django_rl.unblock("b", ID) is False


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_exact_across_processes(redis_server, redis_client, name):
    import multiprocessing

    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=120_000)
    from tests.blocks.points_workers import penalize_and_reward

    policies = {name: {**ALGORITHMS[name], "key": "ip"}}
    context = multiprocessing.get_context("spawn")
    go, results = context.Event(), context.Queue()
    readies = [context.Event() for _ in range(3)]
    children = [
        context.Process(
            target=penalize_and_reward,
            args=(redis_server.url, policies, name, ID, ready, go, results),
        )
        for ready in readies
    ]
    for child in children:
        child.start()
    try:
        for ready in readies:
            assert ready.wait(60), "a child process did not start"
        with override_settings(DJANGO_RL={"POLICIES": policies}):
            policy = get_policy(name)
            policy.penalize(ID, 1_000)  # far past the limit: every point counts
            go.set()
            assert [results.get(timeout=120) for _ in children] == ["done"] * 3
            # 1000 + 3 processes * 8 threads * 10 * (3 - 1) = 1480 points.
            assert policy.reward(ID, 1_480 - 4).remaining == 6
    finally:
        for child in children:
            child.join(30)
            if child.is_alive():
                child.kill()
    assert all(child.exitcode == 0 for child in children)
