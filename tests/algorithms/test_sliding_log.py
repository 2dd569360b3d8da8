"""sliding_log with weighted hits: one entry per hit, so time and memory do not grow with cost.

The time of a hit is the script's duration as Redis records it in SLOWLOG
(microseconds spent running the command on the server; the round trip and
the client do not count), so the bounds hold on a busy machine.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from django_rl import get_policy
from tests.conftest import server_ms

ID = "ip:198.51.100.7"
HOUR_MS = 3_600_000


@pytest.fixture
def slowlog(redis_client: redis.Redis) -> Iterator[redis.Redis]:
    """Log every command in SLOWLOG for the test; restore the server's settings after."""
    saved = redis_client.config_get("slowlog-*")
    redis_client.config_set("slowlog-log-slower-than", 0)
    redis_client.config_set("slowlog-max-len", 1000)
    try:
        yield redis_client
    finally:
        for name, value in saved.items():
            redis_client.config_set(name, value)


def script_us(client: redis.Redis, hit) -> int:
    """Run ``hit()``; return the server time in µs of the one script it ran."""
    client.slowlog_reset()
    hit()
    runs = [e for e in client.slowlog_get(1000) if e["command"].split()[0] in (b"EVALSHA", b"EVAL")]
    assert len(runs) == 1, runs
    return int(runs[0]["duration"])


def identity_keys(client: redis.Redis) -> list[bytes]:
    return list(client.scan_iter(match=f"t:p:{{{ID}}}*"))


def use(settings, rate: str):
    settings.DJANGO_RL = {
        "KEY_PREFIX": "t",
        "POLICIES": {"p": {"algorithm": "sliding_log", "rate": rate}},
    }
    policy = get_policy("p")
    policy.peek("ip:192.0.2.1")  # loads the script: its compilation is not timed
    return policy


def test_a_heavy_hit_takes_under_50_ms_and_leaves_under_100_kb(settings, slowlog):
    policy = use(settings, "200000/h")
    decisions = []
    times = [
        script_us(slowlog, lambda cost=cost: decisions.append(policy.hit(ID, cost=cost)))
        for cost in (100_000, 99_999, 2)
    ]
    assert [(d.allowed, d.remaining) for d in decisions] == [
        (True, 100_000),
        (True, 1),
        (False, 1),
    ]
    assert max(times) < 50_000, times
    keys = identity_keys(slowlog)
    assert len(keys) == 1
    assert sum(slowlog.memory_usage(key, samples=0) for key in keys) < 100_000
    # Every key has a TTL: the newest entry leaves the window within the hour.
    assert all(0 < slowlog.pttl(key) <= HOUR_MS for key in keys)


def test_mixed_costs_are_counted_exactly_with_one_entry_per_allowed_hit(settings, redis_client):
    policy = use(settings, "10/h")
    costs = [3, 4, 2, 2, 1, 1, 5, 1]
    decisions = [policy.hit(ID, cost=cost) for cost in costs]
    assert [(d.allowed, d.remaining) for d in decisions] == [
        (True, 7),
        (True, 3),
        (True, 1),
        (False, 1),  # 9 + 2 > 10: denied, adds nothing
        (True, 0),
        (False, 0),
        (False, 0),
        (False, 0),
    ]
    (key,) = identity_keys(redis_client)
    assert redis_client.zcard(key) == 4  # the allowed hits, whatever their cost
    assert policy.peek(ID).remaining == 0


def test_retry_after_of_a_denied_heavy_hit_is_exact(settings, slowlog):
    policy = use(settings, "200000/h")
    for cost in (60_000, 70_000, 60_000):
        assert script_us(slowlog, lambda cost=cost: policy.hit(ID, cost=cost)) < 50_000
        wait_ms = server_ms(slowlog) + 20
        while server_ms(slowlog) < wait_ms:  # the three hits in distinct milliseconds
            pass
    (key,) = identity_keys(slowlog)
    scores = sorted({int(score) for _, score in slowlog.zrange(key, 0, -1, withscores=True)})
    assert len(scores) == 3
    # 190,000 used: a hit of cost 80,000 fits once 70,000 units have left,
    # that is once the first two hits (130,000) have: when the second one does.
    denied = policy.hit(ID, cost=80_000)
    assert (denied.allowed, denied.remaining) == (False, 10_000)
    retry_ms, reset_ms = round(denied.retry_after * 1000), round(denied.reset_after * 1000)
    # Both count from the same server time inside the script.
    assert reset_ms - retry_ms == scores[2] - scores[1]
    assert 0 < HOUR_MS - retry_ms < 5_000
    # One of cost 60,000 needs only the first hit to leave.
    denied = policy.hit(ID, cost=60_000)
    retry_ms, reset_ms = round(denied.retry_after * 1000), round(denied.reset_after * 1000)
    assert reset_ms - retry_ms == scores[2] - scores[0]


def test_entries_that_left_are_deleted_a_bounded_number_at_a_time(settings, redis_client):
    policy = use(settings, "5000/h")
    key = policy.key(ID)
    # 2,500 entries that left the window an hour ago, as hits of cost 1 would
    # have left them (places 0..2499, the form sliding_log.lua writes).
    old = server_ms(redis_client) - HOUR_MS - 1000
    redis_client.zadd(key, {str(10**10 + place): old for place in range(2500)})
    redis_client.pexpire(key, 60_000)
    sizes = []
    for _ in range(4):
        decision = policy.hit(ID, cost=2)
        sizes.append(redis_client.zcard(key))
        assert decision.allowed
    # At most 1,000 leftovers go per hit; the decisions never count them.
    assert sizes == [1501, 502, 3, 4]
    assert policy.peek(ID).remaining == 5000 - 8


def test_places_wrap_around_and_a_clock_that_stepped_back_keeps_the_order(settings, redis_client):
    policy = use(settings, "5/h")  # places are kept modulo 10^7
    key = policy.key(ID)
    # A log written when the server's clock was 10 s ahead, whose next hit
    # starts at place 10^7, that is 0: costs 2 and 1 at places 9999997 and 9999999.
    ahead = server_ms(redis_client) + 10_000
    redis_client.zadd(key, {"19999997:2": ahead, "19999999": ahead})
    redis_client.pexpire(key, HOUR_MS + 10_000)
    assert policy.peek(ID).remaining == 2
    assert policy.hit(ID).remaining == 1
    assert policy.hit(ID).remaining == 0
    # Entries are never scored before the newest one; the one at place 0
    # would sort before place 9999999 at the same score, so it is 1 ms later.
    assert redis_client.zrange(key, 0, -1, withscores=True) == [
        (b"19999997:2", ahead),
        (b"19999999", ahead),
        (b"10000000", ahead + 1),
        (b"10000001", ahead + 1),
    ]
    denied = policy.hit(ID, cost=2)
    assert (denied.allowed, denied.remaining) == (False, 0)
    # Cost 2 fits once the hit of cost 2 has left; the log is empty 1 ms later.
    retry_ms, reset_ms = round(denied.retry_after * 1000), round(denied.reset_after * 1000)
    assert reset_ms - retry_ms == 1
    assert HOUR_MS + 9_000 < retry_ms <= HOUR_MS + 10_000
