"""``gcra``: a token bucket's answers from one integer, exact for every rate.

Most cases run the script at times the test chooses (the time argument that
``CLOCK: "app"`` passes), against an independent model of GCRA in exact
fractions: the script must give the model's answer to the millisecond, for
rates whose emission interval is no whole number of milliseconds too, and
across the wrap of its stored value. The rest go through ``get_policy`` on
the real server clock.
"""

from __future__ import annotations

import math
import time
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from django_rl import get_policy
from django_rl.algorithms import Outcome
from django_rl.algorithms.base import ParameterError
from django_rl.algorithms.gcra import SCRIPT, Gcra
from django_rl.core.rates import parse_rate
from tests.conftest import server_ms, sleep_until
from tests.support.scripts import kept

KEY = "t:g:{ip:198.51.100.7}:1"


class Model:
    """GCRA in exact fractions of a millisecond: the arrival time of the next hit."""

    def __init__(self, burst: int, rate: str) -> None:
        parsed = parse_rate(rate)
        self.interval = Fraction(parsed.period_ms, parsed.limit)
        self.burst = burst
        self.tat: Fraction | None = None

    def hit(self, now_ms: int, cost: int = 1) -> Outcome:
        lead = max(self.tat - now_ms, Fraction(0)) if self.tat is not None else Fraction(0)
        wanted = lead + cost * self.interval
        tolerance = self.burst * self.interval
        allowed = wanted <= tolerance
        if allowed:
            lead = wanted
            self.tat = now_ms + lead
        retry = 0 if allowed else math.ceil(wanted - tolerance)
        remaining = math.floor((tolerance - lead) / self.interval)
        return Outcome(allowed, remaining, retry, math.ceil(lead))


#: The script, keeping its key past the TTL it sets (see tests/support/scripts.py).
KEPT = kept(SCRIPT.source)


def hit_at(client, algorithm: Gcra, now_ms: int, cost: int = 1, commit: str = "1") -> Outcome:
    reply = client.eval(KEPT, 1, KEY, *algorithm.script_args(cost, commit), str(now_ms))
    return algorithm.outcome(reply)


@pytest.mark.parametrize(
    ("burst", "rate"),
    [(1, "3/s"), (5, "10/s"), (3, "7/m"), (2, "999999937/s"), (10, "1/366d"), (4, "2/7")],
)
def test_answers_as_the_exact_model_does(redis_client, burst, rate):
    """Hits every few ms for a while: the same answers, to the millisecond."""
    algorithm = Gcra(burst, parse_rate(rate))
    model = Model(burst, rate)
    start = 1_764_547_200_000  # 2025-12-01T00:00:00Z
    step = max(1, math.ceil(model.interval / 7))
    for i in range(400):
        now = start + i * step
        cost = 1 + i % min(burst, 3)
        assert hit_at(redis_client, algorithm, now, cost) == model.hit(now, cost), (i, now)


@given(
    burst=st.integers(1, 20),
    limit=st.integers(1, 10**9),
    period_ms=st.sampled_from([1_000, 7_000, 60_000, 3_600_000, 86_400_000]),
    gaps=st.lists(st.tuples(st.integers(0, 5_000), st.integers(1, 3)), min_size=1, max_size=40),
)
@hypothesis_settings(max_examples=60, deadline=None)
def test_any_rate_and_timing(redis_server, burst, limit, period_ms, gaps):
    client = redis_server.client()
    client.delete(KEY)
    rate = f"{limit}/{period_ms // 1000}"
    try:
        algorithm = Gcra(burst, parse_rate(rate))
    except ParameterError:
        return  # a span too long to count exactly: said when configured
    model = Model(burst, rate)
    now = 1_764_547_200_000
    for gap, cost in gaps:
        now += gap
        cost = min(cost, burst)
        assert hit_at(client, algorithm, now, cost) == model.hit(now, cost)
    client.close()


def test_the_stored_value_wraps_without_a_step(redis_client):
    """The TAT is stored modulo a wrap (2^22 ms at this rate): crossing it changes nothing."""
    algorithm = Gcra(3, parse_rate("999999937/s"))
    assert algorithm.wrap_ms == 2**22
    model = Model(3, "999999937/s")
    wrap_edge = (1_764_547_200_000 // 2**22 + 1) * 2**22
    for now in range(wrap_edge - 3, wrap_edge + 3):
        for _ in range(4):  # three fit in each ms at most, plus the burst
            assert hit_at(redis_client, algorithm, now) == model.hit(now)


def test_peek_changes_nothing(redis_client):
    algorithm = Gcra(2, parse_rate("1/s"))
    now = 1_764_547_200_000
    assert hit_at(redis_client, algorithm, now, commit="0") == Outcome(True, 2, 0, 0)
    assert redis_client.exists(KEY) == 0
    hit_at(redis_client, algorithm, now)
    value = redis_client.get(KEY)
    assert hit_at(redis_client, algorithm, now + 10, commit="0") == Outcome(True, 1, 0, 990)
    assert redis_client.get(KEY) == value


def test_denied_hits_change_nothing_and_a_heavy_denial_leaves_room_for_a_light_hit(redis_client):
    algorithm = Gcra(5, parse_rate("5/s"))
    now = 1_764_547_200_000
    assert hit_at(redis_client, algorithm, now, cost=3).allowed
    value = redis_client.get(KEY)
    heavy = hit_at(redis_client, algorithm, now, cost=3)
    assert (heavy.allowed, heavy.remaining, heavy.retry_after_ms) == (False, 2, 200)
    assert redis_client.get(KEY) == value
    assert hit_at(redis_client, algorithm, now, cost=2) == Outcome(True, 0, 0, 1_000)


def test_the_key_lives_until_the_arrival_time(redis_client, settings):
    settings.DJANGO_RL = {
        "KEY_PREFIX": "t",
        "POLICIES": {"g": {"algorithm": "gcra", "rate": "10/m", "burst": 4}},
    }
    policy = get_policy("g")
    for _ in range(3):
        policy.hit("ip:198.51.100.7")
    (key,) = redis_client.keys("t:*")
    # Three hits of 6 s each ahead of now.
    assert 17_900 < redis_client.pttl(key) <= 18_000


def test_memory_per_identity_is_no_more_than_a_fixed_window_counter(redis_client, settings):
    """One integer: the memory of fixed_window's counter under a key name of the same length."""
    settings.DJANGO_RL = {
        "KEY_PREFIX": "t",
        "POLICIES": {"g": {"algorithm": "gcra", "rate": "100/h", "burst": 100}},
    }
    policy = get_policy("g")
    for _ in range(100):
        policy.hit("ip:198.51.100.7")
    (key,) = redis_client.keys("t:g:*")
    assert redis_client.object("encoding", key) == b"int"
    # What fixed_window writes (INCRBY, then an expiry), under a name as long.
    counter = key[:-1] + (b"x" if key[-1:] != b"x" else b"y")
    with redis_client.pipeline() as pipe:
        pipe.incrby(counter, 100).pexpire(counter, 3_600_000).execute()
    assert redis_client.memory_usage(key, samples=0) <= redis_client.memory_usage(
        counter, samples=0
    )


def test_on_the_server_clock_a_burst_then_one_per_interval(settings, redis_client):
    settings.DJANGO_RL = {"POLICIES": {"g": {"algorithm": "gcra", "rate": "5/s", "burst": 2}}}
    policy = get_policy("g")
    identity = "ip:198.51.100.9"
    policy.peek(identity)  # connect before the timed part
    first = server_ms(redis_client)
    assert [policy.hit(identity).allowed for _ in range(3)] == [True, True, False]
    denied = policy.hit(identity)
    elapsed = (server_ms(redis_client) - first) / 1000
    # Two intervals of 200 ms ahead of the first hit, the burst's two taken.
    assert 0.2 - elapsed - 0.001 <= denied.retry_after <= 0.2
    assert denied.reset_after == pytest.approx(denied.retry_after + 0.2, abs=0.002)
    sleep_until(redis_client, server_ms(redis_client) + math.ceil(denied.retry_after * 1000))
    assert policy.hit(identity).allowed
    assert not policy.hit(identity).allowed
    time.sleep(0.21)
    assert policy.hit(identity).allowed


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"rate": "5/s", "burst": 0}, "burst must be between 1 and 1,000,000,000, not 0"),
        ({"rate": "5/s", "burst": "3"}, "burst must be a whole number, not '3'"),
        ({"rate": "5/s", "burst": True}, "burst must be a whole number, not True"),
        ({"rate": "1/366d", "burst": 100_000}, "too long to count exactly"),
    ],
)
def test_bad_bursts_are_parameter_errors(spec, message):
    with pytest.raises(ParameterError, match=message):
        Gcra.from_spec(spec)


def test_static_rates_still_check_the_burst():
    assert Gcra.from_spec({"rate": None, "burst": 3}).name == "unlimited"
    with pytest.raises(ParameterError):
        Gcra.from_spec({"rate": None, "burst": 0})
