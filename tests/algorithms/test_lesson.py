"""The lesson's printed results, reproduced through the public API on every topology."""

from __future__ import annotations

import time

import pytest

from django_rl import get_policy
from tests.conftest import server_ms, sleep_until, start_of_fresh_window

pytestmark = pytest.mark.slow

EDGE_POLICIES = {
    "fw": {"algorithm": "fixed_window", "rate": "5/s", "key": "ip"},
    "sl": {"algorithm": "sliding_log", "rate": "5/s", "key": "ip"},
    "sw": {"algorithm": "sliding_window", "rate": "5/s", "key": "ip"},
}


@pytest.mark.parametrize(("name", "allowed"), [("fw", 10), ("sl", 5), ("sw", 5)])
def test_edge_burst(settings, keyspace, name, allowed):
    """5 hits 100 ms before a 1 s window edge and 5 hits 100 ms after it."""
    settings.DJANGO_RL = {"POLICIES": EDGE_POLICIES}
    policy = get_policy(name)
    # On a loaded machine a burst can straddle its edge: the run is then
    # worth nothing, and is made again at a later edge with a new client.
    for attempt in range(5):
        identity = f"ip:203.0.113.{10 + attempt}"
        # Connect and measure the clock of the identity's node before the timed part.
        policy.peek(identity)
        edge = (server_ms(keyspace) // 1000 + 1) * 1000
        if edge - server_ms(keyspace) < 300:
            edge += 1000
        sleep_until(keyspace, edge - 100)
        before = [policy.hit(identity).allowed for _ in range(5)]
        if server_ms(keyspace) >= edge:
            continue  # the machine stalled: the burst straddled the edge
        sleep_until(keyspace, edge + 100)
        after = [policy.hit(identity).allowed for _ in range(5)]
        if server_ms(keyspace) >= edge + 1000:
            continue  # the second burst reached the window after
        break
    else:
        pytest.fail("5 runs in a row straddled a window edge: the machine stalled each time")
    assert sum(before) + sum(after) == allowed


def test_token_bucket_refill(settings, keyspace):
    """Capacity 3, refill 1/s: five quick hits, then one after 1.1 s -> 1 1 1 0 0 1."""
    settings.DJANGO_RL = {
        "POLICIES": {"tb": {"algorithm": "token_bucket", "capacity": 3, "rate": "1/s"}}
    }
    policy = get_policy("tb")
    results = [policy.hit("ip:203.0.113.9").allowed for _ in range(5)]
    time.sleep(1.1)
    results.append(policy.hit("ip:203.0.113.9").allowed)
    assert [int(r) for r in results] == [1, 1, 1, 0, 0, 1]


def test_fixed_window_retry_after_is_the_time_left(settings, keyspace):
    """7 hits on 5/minute: the 6th and 7th are denied, remaining 0, Retry-After = time left."""
    settings.DJANGO_RL = {"POLICIES": {"fw": {"algorithm": "fixed_window", "rate": "5/m"}}}
    policy = get_policy("fw")
    now = start_of_fresh_window(keyspace, 60_000, min_left_ms=5_000)
    decisions = [policy.hit("ip:203.0.113.9") for _ in range(7)]
    left = (60_000 - now % 60_000) / 1000
    assert [d.allowed for d in decisions] == [True] * 5 + [False] * 2
    assert [d.remaining for d in decisions] == [4, 3, 2, 1, 0, 0, 0]
    for denied in decisions[5:]:
        assert abs(denied.retry_after - left) <= 1.0
        assert denied.retry_after_header == pytest.approx(left, abs=1.0)
        assert denied.reset_after == denied.retry_after
