"""Each algorithm's semantics: cost, peek, reset, Retry-After, TTLs."""

from __future__ import annotations

import time

import pytest

from django_rl import get_policy
from tests.conftest import server_ms, start_of_fresh_window

ALGORITHMS = [
    pytest.param({"algorithm": "fixed_window", "rate": "10/h"}, id="fixed_window"),
    pytest.param({"algorithm": "sliding_log", "rate": "10/h"}, id="sliding_log"),
    pytest.param({"algorithm": "token_bucket", "capacity": 10, "rate": "10/h"}, id="token_bucket"),
    pytest.param({"algorithm": "gcra", "burst": 10, "rate": "10/h"}, id="gcra"),
    pytest.param({"algorithm": "sliding_window", "rate": "10/h"}, id="sliding_window"),
]
ID = "ip:198.51.100.7"


@pytest.fixture(params=ALGORITHMS)
def policy(request, settings, redis_client):
    settings.DJANGO_RL = {"KEY_PREFIX": "t", "POLICIES": {"p": request.param}}
    # Hours-long windows: a test never meets an edge unless it is at the very
    # end of one, which this rules out.
    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=60_000)
    return get_policy("p")


def longest_ttl_ms(policy):
    """Return the longest a key of ``policy`` (10 an hour) may live.

    A sliding window's counts matter until the window after theirs ends.
    """
    return 7_200_000 if policy.algorithm.name == "sliding_window" else 3_600_000


def all_keys(client):
    """Return the counters' keys (not the reset token, ``t:~epoch``), sorted."""
    return sorted(k.decode() for k in client.scan_iter(match="t:*") if not k.startswith(b"t:~"))


def test_counts_down_to_exactly_the_limit(policy):
    decisions = [policy.hit(ID) for _ in range(12)]
    assert [d.allowed for d in decisions] == [True] * 10 + [False] * 2
    assert [d.remaining for d in decisions] == [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0]
    assert all(d.limit == 10 and d.policy == "p" and not d.degraded for d in decisions)
    assert all(d.retry_after == 0.0 for d in decisions[:10])
    assert all(d.retry_after > 0 for d in decisions[10:])


def test_cost_weighs_a_hit(policy):
    assert policy.hit(ID, cost=4).remaining == 6
    assert policy.hit(ID, cost=6).remaining == 0
    denied = policy.hit(ID, cost=3)
    assert (denied.allowed, denied.remaining) == (False, 0)


def test_cost_above_the_limit_is_an_error(policy):
    with pytest.raises(ValueError, match=r"cost 11 is above the limit 10 of policy 'p'"):
        policy.hit(ID, cost=11)
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="cost must be a whole number"):
            policy.hit(ID, cost=bad)
    # More digits than Python writes as text: still this error, not another ValueError.
    huge = "<a whole number of about 5,001 digits>"
    with pytest.raises(ValueError, match=f"^cost {huge} is above the limit 10 of policy 'p'"):
        policy.hit(ID, cost=10**5000)
    with pytest.raises(
        ValueError, match=f"^cost must be a whole number of at least 1, not <a negative {huge[3:]}$"
    ):
        policy.hit(ID, cost=-(10**5000))


def test_peek_counts_nothing(policy, redis_client):
    fresh = policy.peek(ID)
    assert (fresh.allowed, fresh.remaining, fresh.retry_after, fresh.reset_after) == (
        True,
        10,
        0.0,
        0.0,
    )
    assert all_keys(redis_client) == []
    policy.hit(ID, cost=3)
    for _ in range(3):
        assert policy.peek(ID).remaining == 7
    policy.hit(ID, cost=7)
    full = policy.peek(ID)
    assert (full.allowed, full.remaining) == (False, 0)
    assert full.retry_after > 0
    assert policy.hit(ID).allowed is False


def test_reset_forgets_one_identity(policy, redis_client):
    other = "ip:198.51.100.8"
    for _ in range(10):
        policy.hit(ID)
    policy.hit(other)
    assert policy.hit(ID).allowed is False
    assert policy.reset(ID) == 1
    assert policy.peek(ID).remaining == 10
    assert policy.hit(ID).allowed is True
    assert policy.peek(other).remaining == 9
    assert policy.reset("ip:never-seen") == 0


def test_reset_after_and_retry_after_agree(policy, redis_client):
    for _ in range(10):
        policy.hit(ID)
    denied = policy.hit(ID)
    if policy.algorithm.name == "fixed_window":
        # Everything comes back at once, at the end of the aligned window.
        left = (3_600_000 - server_ms(redis_client) % 3_600_000) / 1000
        assert denied.retry_after == denied.reset_after == pytest.approx(left, abs=0.1)
    elif policy.algorithm.name == "sliding_log":
        # The first hit frees one slot an hour after it; the last frees all.
        assert 3599 < denied.retry_after <= denied.reset_after <= 3600
    elif policy.algorithm.name == "sliding_window":
        # This window's ten slide out over the next: the first hit fits a
        # tenth of the way into it; the estimate is 0 when it ends.
        left = (3_600_000 - server_ms(redis_client) % 3_600_000) / 1000
        assert denied.retry_after == pytest.approx(left + 360, abs=0.1)
        assert denied.reset_after == pytest.approx(left + 3600, abs=0.1)
    else:
        # token_bucket and gcra: one hit is back after 6 minutes; all ten
        # after an hour.
        assert 359 < denied.retry_after <= 360
        assert 3599 < denied.reset_after <= 3600


def test_every_key_has_a_ttl(policy, redis_client):
    for i in range(30):
        policy.hit(f"ip:10.0.0.{i % 7}", cost=1 + i % 3)
        policy.peek(f"ip:10.0.0.{i % 5}")
    keys = all_keys(redis_client)
    assert len(keys) == 7
    assert all(0 < redis_client.pttl(k) <= longest_ttl_ms(policy) for k in keys)


def test_a_key_that_lost_its_ttl_is_healed_by_the_next_hit(policy, redis_client):
    policy.hit(ID)
    (key,) = all_keys(redis_client)
    redis_client.persist(key)
    assert redis_client.pttl(key) == -1
    policy.hit(ID)
    assert 0 < redis_client.pttl(key) <= longest_ttl_ms(policy)


def test_a_key_that_lost_its_ttl_is_healed_by_a_denied_hit(policy, redis_client):
    for _ in range(10):
        policy.hit(ID)
    (key,) = all_keys(redis_client)
    redis_client.persist(key)
    assert policy.hit(ID).allowed is False
    assert 0 < redis_client.pttl(key) <= longest_ttl_ms(policy)


def test_key_format(policy, redis_client):
    policy.hit(ID)
    (key,) = all_keys(redis_client)
    head = f"t:p:{{{ID}}}:{policy.fingerprint}"
    if policy.algorithm.name == "fixed_window":
        window = server_ms(redis_client) // 3_600_000
        assert key == f"{head}:{window}"
    else:
        assert key == head


def test_changing_the_policy_starts_fresh(settings, redis_client):
    settings.DJANGO_RL = {"POLICIES": {"p": {"algorithm": "sliding_log", "rate": "2/h"}}}
    before = get_policy("p")
    before.hit(ID)
    before.hit(ID)
    assert before.hit(ID).allowed is False
    settings.DJANGO_RL = {"POLICIES": {"p": {"algorithm": "sliding_log", "rate": "3/h"}}}
    after = get_policy("p")
    assert after.fingerprint != before.fingerprint
    assert after.peek(ID).remaining == 3


def test_sliding_log_retry_after_waits_for_enough_old_entries(settings, redis_client):
    settings.DJANGO_RL = {"POLICIES": {"p": {"algorithm": "sliding_log", "rate": "3/10s"}}}
    policy = get_policy("p")
    first = server_ms(redis_client)
    policy.hit(ID, cost=2)
    time.sleep(0.3)
    policy.hit(ID)
    # A hit of cost 2 needs both entries of the first hit to leave.
    denied = policy.hit(ID, cost=2)
    assert not denied.allowed
    expected = (first + 10_000 - server_ms(redis_client)) / 1000
    assert denied.retry_after == pytest.approx(expected, abs=0.1)
    # The newest entry decides when the log is empty.
    assert denied.reset_after == pytest.approx(expected + 0.3, abs=0.1)


def test_token_bucket_retry_after_is_the_time_to_refill(settings):
    settings.DJANGO_RL = {
        "POLICIES": {"p": {"algorithm": "token_bucket", "capacity": 4, "rate": "2/s"}}
    }
    policy = get_policy("p")
    assert policy.hit(ID, cost=4).allowed
    denied = policy.hit(ID, cost=3)
    assert not denied.allowed
    # 3 tokens at 2/s: 1.5 s (less the few ms since the bucket emptied).
    assert 1.4 < denied.retry_after <= 1.5
    assert 1.9 < denied.reset_after <= 2.0
