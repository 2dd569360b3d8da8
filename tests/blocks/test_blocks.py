"""block_for and escalate: decided in the decision's one round trip, on every algorithm."""

from __future__ import annotations

import asyncio

import pytest

from django_rl import get_policy
from django_rl.exceptions import ConfigurationError
from django_rl.signals import identity_blocked
from tests.conftest import server_ms, sleep_until, start_of_fresh_window

ALGORITHMS = {
    "fixed_window": {"algorithm": "fixed_window", "rate": "2/h"},
    "sliding_log": {"algorithm": "sliding_log", "rate": "2/h"},
    "token_bucket": {"algorithm": "token_bucket", "capacity": 2, "rate": "2/h"},
    "gcra": {"algorithm": "gcra", "burst": 2, "rate": "2/h"},
    "sliding_window": {"algorithm": "sliding_window", "rate": "2/h"},
}
ID = "ip:192.0.2.50"


@pytest.fixture(params=list(ALGORITHMS))
def spec(request, redis_client):
    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=120_000)
    return {**ALGORITHMS[request.param], "key": "ip"}


@pytest.fixture
def blocks_sent():
    sent = []

    def receiver(sender, **kwargs):
        sent.append(kwargs)

    identity_blocked.connect(receiver)
    yield sent
    identity_blocked.disconnect(receiver)


def use(settings, spec, **keys):
    settings.DJANGO_RL = {"POLICIES": {"p": {**spec, **keys}}, "DENY_CACHE_SIZE": 0}
    return get_policy("p")


def test_block_for_starts_with_the_denial_and_reports_it(settings, spec, blocks_sent):
    policy = use(settings, spec, block_for="1d")
    assert [policy.hit(ID).allowed for _ in range(2)] == [True, True]
    denial = policy.hit(ID)
    assert not denial.allowed
    assert 86_399 <= denial.retry_after <= 86_400
    assert denial.retry_after_header == 86_400
    assert [(b["policy"], b["identity"], b["seconds"], b["request"]) for b in blocks_sent] == [
        ("p", ID, 86_400.0, None)
    ]
    # Blocked: denied, not counted, no second block.
    for _ in range(3):
        assert 86_390 <= policy.hit(ID).retry_after <= 86_400
    assert len(blocks_sent) == 1
    peeked = policy.peek(ID)
    assert not peeked.allowed and peeked.retry_after > 86_390
    assert policy.unblock(ID) is True
    assert policy.unblock(ID) is False
    # The algorithm's own state: still 2 used (blocked hits were not counted).
    after = policy.peek(ID)
    assert not after.allowed and after.retry_after < 7_200


def test_blocked_hits_are_not_counted(settings, spec, redis_client):
    policy = use(settings, spec, block_for=30)
    policy.block(ID, 30)
    for _ in range(5):
        assert not policy.hit(ID).allowed
    policy.unblock(ID)
    assert [policy.hit(ID).allowed for _ in range(3)] == [True, True, False]


def test_escalate_blocks_after_denials_within_the_period(settings, spec, blocks_sent):
    policy = use(settings, spec, escalate={"after": 3, "within": "1h", "block_for": "1d"})
    assert [policy.hit(ID).allowed for _ in range(2)] == [True, True]
    first, second = policy.hit(ID), policy.hit(ID)
    assert first.retry_after < 80_000 and second.retry_after < 80_000
    assert blocks_sent == []
    third = policy.hit(ID)
    assert 86_399 <= third.retry_after <= 86_400
    assert [b["seconds"] for b in blocks_sent] == [86_400.0]
    assert policy.hit(ID).retry_after > 86_390
    assert len(blocks_sent) == 1


def test_both_the_later_end_wins(settings, spec, blocks_sent):
    policy = use(
        settings, spec, block_for="1m", escalate={"after": 2, "within": "1h", "block_for": "1d"}
    )
    policy.hit(ID), policy.hit(ID)
    assert 59 <= policy.hit(ID).retry_after < 7_200  # block_for (or the algorithm's wait)
    policy.unblock(ID)
    assert 86_399 <= policy.hit(ID).retry_after <= 86_400  # escalated: the day wins
    assert [b["seconds"] for b in blocks_sent] == [60.0, 86_400.0]


def test_retry_after_is_the_later_of_block_and_algorithm(settings, spec):
    policy = use(settings, spec, block_for="1s")
    policy.hit(ID), policy.hit(ID)
    # The block is shorter than the algorithm's own wait (up to an hour).
    assert policy.hit(ID).retry_after > 60


def test_async_hits_block_too(settings, spec, blocks_sent):
    policy = use(settings, spec, block_for="1h")

    async def run():
        return [await policy.ahit(ID) for _ in range(4)]

    decisions = asyncio.run(run())
    assert [d.allowed for d in decisions] == [True, True, False, False]
    assert decisions[-1].retry_after > 3_590
    assert len(blocks_sent) == 1


def test_async_hits_escalate_and_stay_blocked_as_sync_hits_do(settings, spec, blocks_sent):
    policy = use(settings, spec, escalate={"after": 3, "within": "1h", "block_for": "1d"})

    async def run():
        return [await policy.ahit(ID) for _ in range(6)]

    decisions = asyncio.run(run())
    assert [d.allowed for d in decisions] == [True, True, False, False, False, False]
    assert all(d.retry_after < 80_000 for d in decisions[2:4])  # denied, not yet blocked
    assert all(86_390 <= d.retry_after <= 86_400 for d in decisions[4:])  # escalated
    assert [b["seconds"] for b in blocks_sent] == [86_400.0]
    # The sync path sees the same state: blocked, and the two allowed hits counted.
    assert 86_390 <= policy.hit(ID).retry_after <= 86_400
    policy.unblock(ID)
    assert not policy.peek(ID).allowed


def test_the_deny_cache_answers_a_blocked_flood(settings, spec, redis_client):
    settings.DJANGO_RL = {"POLICIES": {"p": {**spec, "block_for": "1h"}}}
    policy = get_policy("p")
    policy.hit(ID), policy.hit(ID)
    policy.hit(ID)  # the block (the token is read: not remembered)
    policy.hit(ID)  # remembered
    before = int(redis_client.info("stats")["total_commands_processed"])
    flood = [policy.hit(ID) for _ in range(1_000)]
    commands = int(redis_client.info("stats")["total_commands_processed"]) - before - 1
    assert all(not d.allowed and d.retry_after > 3_500 for d in flood)
    assert commands / 1_000 <= 0.01


def test_with_escalate_the_deny_cache_answers_only_blocked(settings, spec, blocks_sent):
    settings.DJANGO_RL = {
        "POLICIES": {"p": {**spec, "escalate": {"after": 3, "within": "1h", "block_for": "1d"}}}
    }
    policy = get_policy("p")
    policy.hit(ID), policy.hit(ID)
    assert [policy.hit(ID).allowed for _ in range(3)] == [False] * 3
    assert [b["seconds"] for b in blocks_sent] == [86_400.0]


def test_unblock_forgets_the_remembered_denial_at_once(settings, spec):
    settings.DJANGO_RL = {"POLICIES": {"p": {**spec, "block_for": "1h"}}}
    policy = get_policy("p")
    policy.block(ID, 3_600)
    for _ in range(3):
        assert not policy.hit(ID).allowed
    assert policy.unblock(ID)
    assert policy.hit(ID).allowed


def test_one_round_trip_with_block_for_and_escalate(settings, spec, redis_client):
    policy = use(
        settings, spec, block_for="1m", escalate={"after": 2, "within": "1h", "block_for": "1h"}
    )
    policy.hit("ip:warm")  # connect, load the script
    for expected in (True, True, False, False, False):
        before = int(redis_client.info("stats")["total_reads_processed"])
        assert policy.hit(ID).allowed is expected
        reads = int(redis_client.info("stats")["total_reads_processed"]) - before
        assert reads == 1 + 1  # the decision's, then this INFO's


def test_together_honours_blocks(settings, spec, blocks_sent):
    from django_rl import hit_many

    settings.DJANGO_RL = {
        "POLICIES": {
            "p": {**spec, "block_for": "1h"},
            "wide": {"algorithm": "sliding_log", "rate": "100/h", "key": "ip"},
        },
        "DENY_CACHE_SIZE": 0,
    }
    hits = [("p", ID, 1), ("wide", ID, 1)]
    assert [all(d.allowed for d in hit_many(hits)) for _ in range(2)] == [True, True]
    denied = hit_many(hits)
    assert not denied[0].allowed and denied[0].retry_after > 3_590
    assert len(blocks_sent) == 1
    again = hit_many(hits)
    assert not again[0].allowed and again[0].retry_after > 3_590
    assert len(blocks_sent) == 1
    assert get_policy("wide").peek(ID).remaining == 98  # denied requests count nowhere


@pytest.mark.parametrize(
    "keys",
    [
        {"block_for": 0},
        {"block_for": -5},
        {"block_for": "10x"},
        {"block_for": "99999999999d"},
        {"block_for": True},
        {"escalate": {"after": 3, "within": "1h"}},
        {"escalate": {"after": 0, "within": "1h", "block_for": "1d"}},
        {"escalate": {"after": 3, "within": "1h", "block_for": "1d", "x": 1}},
        {"escalate": "3/h"},
    ],
)
def test_bad_keys_are_check_errors_and_raise_on_use(settings, keys):
    from django_rl.checks.system import check_settings

    settings.DJANGO_RL = {"POLICIES": {"p": {"algorithm": "fixed_window", "rate": "2/h", **keys}}}
    errors = [e for e in check_settings() if e.id.startswith("django_rl.E13")]
    assert errors and all(e.hint for e in errors)
    with pytest.raises(ConfigurationError):
        get_policy("p")


def test_unused_server_ms(redis_client):
    assert server_ms(redis_client) > 0


def test_the_signal_names_the_request_of_the_denial(settings, spec, blocks_sent):
    from django.test import RequestFactory

    policy = use(settings, spec, block_for="1h")
    request = RequestFactory().get("/", REMOTE_ADDR="192.0.2.50")
    decisions = [policy.hit_request(request) for _ in range(4)]
    assert [d.allowed for d in decisions] == [True, True, False, False]
    assert [(b["identity"], b["request"]) for b in blocks_sent] == [(ID, request)]


def test_during_an_outage_a_policy_with_blocks_is_degraded(settings, spec):
    from django.test import override_settings

    from tests.support.redis_server import caches_for, free_port

    settings.DJANGO_RL = {"POLICIES": {"p": {**spec, "block_for": "1h", "fallback_rate": "1/h"}}}
    with override_settings(CACHES=caches_for(f"redis://127.0.0.1:{free_port()}/0")):
        policy = get_policy("p")
        first, second = policy.hit(ID), policy.hit(ID)
        assert first.degraded and first.allowed
        assert second.degraded and not second.allowed
        assert policy.peek(ID).degraded


def test_usage_reports_a_block(settings, spec):
    from django.test import RequestFactory

    from django_rl import usage

    policy = use(settings, spec, block_for="1h")
    policy.block(ID, 600)
    (decision,) = usage(RequestFactory().get("/", REMOTE_ADDR="192.0.2.50"), ["p"])
    assert not decision.allowed and 590 < decision.retry_after <= 600


def test_an_operators_block_is_enforced_in_shadow_mode(settings, spec):
    from django_rl import hit_many

    settings.DJANGO_RL = {
        "POLICIES": {
            "p": {**spec, "block_for": "1h", "mode": "shadow"},
            "wide": {"algorithm": "sliding_log", "rate": "100/h", "key": "ip"},
        },
    }
    policy = get_policy("p")
    # The policy's own block: a shadow denial.
    decisions = [policy.hit(ID) for _ in range(4)]
    assert [(d.allowed, d.shadow) for d in decisions[2:]] == [(False, True)] * 2
    policy.unblock(ID)
    policy.reset(ID)
    # An operator's block: enforced, here, from the deny cache and in a request of several.
    policy.block(ID, 600)
    for _ in range(3):
        decision = policy.hit(ID)
        assert not decision.allowed and not decision.shadow and decision.denies
    together = hit_many([("p", ID, 1), ("wide", ID, 1)])
    assert together[0].denies
    assert get_policy("wide").peek(ID).remaining == 100
    assert policy.unblock(ID)
    assert policy.hit(ID).allowed


def test_a_fixed_windows_counter_with_blocks_counts_no_denial_and_keeps_its_ttl(
    settings, redis_client
):
    # fixed_window.lua counts first and takes back a count past the limit; the
    # counter's TTL is set by the hit that makes its count (new, or back at 0).
    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=120_000)
    spec = {**ALGORITHMS["fixed_window"], "key": "ip"}
    policy = use(settings, spec, escalate={"after": 5, "within": "1h", "block_for": "1d"})

    def counter() -> tuple[int, int]:
        """The count and TTL of the window's counter; (0, -2) while it has none."""
        keys = [k for k in redis_client.keys(policy.key(ID) + "*") if not k.endswith(b":b")]
        if not keys:
            return 0, -2
        (key,) = keys
        return int(redis_client.get(key)), redis_client.pttl(key)

    assert [policy.hit(ID).allowed for _ in range(3)] == [True, True, False]
    count, ttl = counter()
    assert count == 2  # the denial counted nowhere
    assert 0 < ttl <= 3_600_000
    policy.reward(ID, 2)
    assert counter()[0] == 0  # (reward deletes a counter it empties)
    assert policy.hit(ID).allowed
    count, ttl = counter()
    assert count == 1
    assert 0 < ttl <= 3_600_000


def test_a_fixed_window_with_blocks_counts_each_hit_in_its_own_window(settings, redis_client):
    # Its EVALSHA is encoded once per window (the window's number in it): the
    # next window's hits count in the next window's counter, and a denial
    # there still starts the block.
    policy = use(
        settings, {"algorithm": "fixed_window", "rate": "2/s", "key": "ip"}, block_for="1h"
    )
    start = start_of_fresh_window(redis_client, 1000, min_left_ms=600)
    window = start // 1000
    assert [policy.hit(ID).allowed for _ in range(2)] == [True, True]
    sleep_until(redis_client, (window + 1) * 1000 + 50)
    decisions = [policy.hit(ID) for _ in range(3)]
    assert [d.allowed for d in decisions] == [True, True, False]
    counter = f"{policy.key(ID)}:{window + 1}"
    assert redis_client.get(counter) == b"2"  # the denial not counted
    assert 0 < redis_client.pttl(counter) <= 950  # it dies with its window
    assert 3_590 < decisions[2].retry_after <= 3_600  # the block's, not the window's
    sleep_until(redis_client, (window + 2) * 1000 + 50)
    assert not policy.hit(ID).allowed  # blocked in the window after
    assert redis_client.get(f"{policy.key(ID)}:{window + 2}") is None
