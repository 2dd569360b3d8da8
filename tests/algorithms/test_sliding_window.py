"""``sliding_window``: two counts, weighted; how close it is to the sliding log.

Most cases run the script at times the test chooses (the time argument that
``CLOCK: "app"`` passes), against an independent model in exact fractions,
and against the sliding log's answers for the same hits. The seed's edge
burst on the real server clock is in ``tests/algorithms/test_lesson.py``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from django_rl import get_policy
from django_rl.algorithms import Outcome, ParameterError
from django_rl.algorithms.sliding_log import SCRIPT as LOG_SCRIPT
from django_rl.algorithms.sliding_log import SlidingLog
from django_rl.algorithms.sliding_window import SCRIPT, SlidingWindow
from django_rl.core.rates import parse_rate
from tests.support.scripts import kept

KEY = "t:w:{ip:198.51.100.7}:1"
LOG_KEY = "t:l:{ip:198.51.100.7}:1"
#: A window edge of every period these tests use (2025-12-01T00:00:00Z).
EPOCH = 1_764_547_200_000


class Model:
    """The sliding window counter in exact fractions: this window's count and the last one's."""

    def __init__(self, rate: str) -> None:
        parsed = parse_rate(rate)
        self.limit, self.period = parsed.limit, parsed.period_ms
        self.counts: dict[int, int] = {}

    def estimate(self, now_ms: int) -> tuple[Fraction, int, int]:
        window, elapsed = divmod(now_ms, self.period)
        prev, curr = self.counts.get(window - 1, 0), self.counts.get(window, 0)
        return Fraction(prev * (self.period - elapsed), self.period) + curr, window, curr

    def first_allowed(self, now_ms: int, cost: int) -> int:
        """Return the first ms at or after ``now_ms`` when a hit of ``cost`` would fit.

        With no more hits the estimate only falls (by a binary search, then).
        """
        low, high = now_ms, now_ms + 2 * self.period
        while low < high:
            mid = (low + high) // 2
            if self.estimate(mid)[0] + cost > self.limit:
                low = mid + 1
            else:
                high = mid
        return low

    def hit(self, now_ms: int, cost: int = 1) -> Outcome:
        estimate, window, curr = self.estimate(now_ms)
        allowed = estimate + cost <= self.limit
        if allowed:
            self.counts[window] = curr + cost
            estimate += cost
        retry = 0 if allowed else self.first_allowed(now_ms, cost) - now_ms
        elapsed = now_ms % self.period
        curr = self.counts.get(window, 0)
        if curr:
            reset = 2 * self.period - elapsed
        elif self.counts.get(window - 1, 0):
            reset = self.period - elapsed
        else:
            reset = 0
        return Outcome(allowed, math.floor(self.limit - estimate), retry, reset)


#: The script, keeping its key past its TTL (see tests/support/scripts.py).
KEPT = kept(SCRIPT.source)
LOG_KEPT = kept(LOG_SCRIPT.source)


def hit_at(client, algorithm, now_ms: int, cost: int = 1, commit: str = "1") -> Outcome:
    reply = client.eval(KEPT, 1, KEY, *algorithm.script_args(cost, commit), str(now_ms))
    return algorithm.outcome(reply)


def log_hit_at(client, algorithm, now_ms: int) -> bool:
    reply = client.eval(LOG_KEPT, 1, LOG_KEY, *algorithm.script_args(1, "1"), str(now_ms))
    return algorithm.outcome(reply).allowed


@pytest.mark.parametrize("rate", ["5/s", "3/7", "100/h", "7/m"])
def test_answers_as_the_exact_model_does(redis_client, rate):
    algorithm = SlidingWindow(parse_rate(rate))
    model = Model(rate)
    step = max(1, algorithm.rate.period_ms // (3 * algorithm.rate.limit))
    for i in range(300):
        now = EPOCH + 17 + i * step
        cost = 1 + i % min(algorithm.rate.limit, 3)
        assert hit_at(redis_client, algorithm, now, cost) == model.hit(now, cost), (i, now)


@given(
    limit=st.integers(1, 30),
    period_s=st.sampled_from([1, 2, 7, 60]),
    gaps=st.lists(st.tuples(st.integers(0, 3_000), st.integers(1, 3)), min_size=1, max_size=40),
)
@hypothesis_settings(max_examples=60, deadline=None)
def test_any_rate_and_timing(redis_server, limit, period_s, gaps):
    client = redis_server.client()
    client.delete(KEY)
    rate = f"{limit}/{period_s}"
    algorithm = SlidingWindow(parse_rate(rate))
    model = Model(rate)
    now = EPOCH
    for gap, cost in gaps:
        now += gap
        cost = min(cost, limit)
        assert hit_at(client, algorithm, now, cost) == model.hit(now, cost)
    client.close()


def test_the_seeds_edge_burst_gets_what_the_sliding_log_gets(redis_client):
    """5 hits 100 ms before a 5/s window's edge, 5 hits 100 ms after: 5 of 10, as the log."""
    window = SlidingWindow(parse_rate("5/s"))
    log = SlidingLog(parse_rate("5/s"))
    edge = EPOCH + 1_000
    times = [edge - 100] * 5 + [edge + 100] * 5
    assert sum(hit_at(redis_client, window, t).allowed for t in times) == 5
    assert sum(log_hit_at(redis_client, log, t) for t in times) == 5


def test_the_worst_case_is_twice_the_limit_less_one_in_one_period(redis_client):
    """The documented worst case, reached: a window's hits at its very end, then a spread.

    The estimate takes the last window's hits as spread evenly; sent all in
    its last millisecond, they still weigh fully in the sliding log while
    the estimate lets them slide out, and a client that then asks every
    millisecond gets ``2 * limit - 1`` hits in one period (the sliding log:
    ``limit``).
    """
    limit, period = 5, 1_000
    window = SlidingWindow(parse_rate("5/s"))
    log = SlidingLog(parse_rate("5/s"))
    times = [EPOCH + 999] * limit + list(range(EPOCH + 1_000, EPOCH + 1_999))
    allowed_at = [t for t in times if hit_at(redis_client, window, t).allowed]
    in_one_period = max(
        sum(1 for t in allowed_at if start <= t < start + period) for start in allowed_at
    )
    assert in_one_period == 2 * limit - 1
    assert sum(log_hit_at(redis_client, log, t) for t in times) == limit


def test_retry_after_is_exact(redis_client):
    """Denied at t with Retry-After r: still denied at t + r - 1 ms, allowed at t + r."""
    algorithm = SlidingWindow(parse_rate("10/s"))
    for t in [EPOCH + 100 * i for i in range(10)]:
        hit_at(redis_client, algorithm, t)
    for now, cost in [(EPOCH + 1_050, 1), (EPOCH + 1_050, 4), (EPOCH + 1_999, 10)]:
        denied = hit_at(redis_client, algorithm, now, cost, commit="0")
        if denied.allowed:
            continue
        wait = denied.retry_after_ms
        assert not hit_at(redis_client, algorithm, now + wait - 1, cost, commit="0").allowed
        assert hit_at(redis_client, algorithm, now + wait, cost, commit="0").allowed


def test_memory_per_identity_is_at_most_400_bytes(redis_client, settings):
    """``MEMORY USAGE`` of an identity's state, key name included, at a large limit."""
    settings.DJANGO_RL = {
        "KEY_PREFIX": "rl",
        "POLICIES": {"api-requests": {"algorithm": "sliding_window", "rate": "1000000/d"}},
    }
    policy = get_policy("api-requests")
    identity = "ip:2001:db8:1234:5678::"
    for _ in range(1_000):
        policy.hit(identity)
    (key,) = redis_client.keys("rl:*")
    assert redis_client.memory_usage(key, samples=0) <= 400


def test_limits_too_large_to_count_exactly_are_parameter_errors():
    with pytest.raises(ParameterError, match="cannot count 1000000000/366d exactly"):
        SlidingWindow.from_spec({"rate": "1000000000/366d"})
    assert SlidingWindow.from_spec({"rate": "100000/366d"}).limit == 100_000
