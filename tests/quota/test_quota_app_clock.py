"""Calendar quotas on this host's clock (``CLOCK: "app"``), moved by time-machine.

The clock is moved across the ends of days, weeks, months and years, and the
daylight-saving changes, in several time zones: each period lets exactly its
limit through, Retry-After and reset run to its end, ``window`` is its length.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis
import time_machine

from django_rl import get_policy

ID = "ip:192.0.2.30"


def at(zone: str, *when: int) -> dt.datetime:
    return dt.datetime(*when, tzinfo=ZoneInfo(zone))  # type: ignore[misc]


@contextmanager
def clock(start: dt.datetime) -> Iterator[Any]:
    with time_machine.travel(start, tick=False) as traveller:
        yield traveller


def quota(settings: Any, **spec: Any) -> Any:
    settings.DJANGO_RL = {
        "CLOCK": "app",
        "POLICIES": {"q": {"algorithm": "quota", "key": "ip", **spec}},
    }
    return get_policy("q")


def spend(policy: Any, n: int) -> list[bool]:
    return [policy.hit(ID).allowed for _ in range(n)]


CASES = [
    # (zone, period, anchor, a time in one period, its end, the period's length in hours)
    ("America/New_York", "day", None, (2026, 12, 3, 23, 59, 59), (2026, 12, 4), 24),
    ("America/New_York", "day", None, (2026, 3, 8, 23, 0), (2026, 3, 9), 23),
    ("America/New_York", "day", None, (2026, 11, 1, 23, 30), (2026, 11, 2), 25),
    ("Europe/London", "day", None, (2026, 3, 29, 12), (2026, 3, 30), 23),
    ("Europe/London", "day", None, (2026, 10, 25, 0, 30), (2026, 10, 26), 25),
    ("Australia/Sydney", "day", None, (2026, 4, 5, 1), (2026, 4, 6), 25),
    ("Australia/Sydney", "day", None, (2026, 10, 4, 3), (2026, 10, 5), 23),
    ("Asia/Kolkata", "week", None, (2026, 12, 6, 23, 59), (2026, 12, 7), 168),
    ("America/New_York", "week", 7, (2026, 12, 5, 22), (2026, 12, 6), 168),
    ("Europe/London", "week", 1, (2026, 3, 29, 22), (2026, 3, 30), 167),
    ("America/New_York", "month", None, (2028, 2, 29, 23, 59), (2028, 3, 1), 29 * 24),
    ("America/New_York", "month", None, (2026, 2, 28, 23, 59), (2026, 3, 1), 28 * 24),
    ("Europe/London", "month", None, (2026, 3, 31, 23, 59), (2026, 4, 1), 31 * 24 - 1),
    ("Australia/Sydney", "month", 15, (2026, 1, 14, 23), (2026, 1, 15), 31 * 24),
    ("America/New_York", "month", 28, (2026, 3, 27, 12), (2026, 3, 28), 28 * 24 - 1),
    ("Australia/Sydney", "year", None, (2026, 12, 31, 23, 59, 59), (2027, 1, 1), 365 * 24),
    ("America/New_York", "year", None, (2028, 12, 31, 23, 0), (2029, 1, 1), 366 * 24),
]


@pytest.mark.parametrize(("zone", "period", "anchor", "inside", "end", "hours"), CASES)
def test_a_period_lets_its_limit_through_and_the_next_begins_at_its_end(
    settings: Any, redis_client: redis.Redis, zone: str, period: str, anchor: int | None,
    inside: tuple[int, ...], end: tuple[int, ...], hours: int,
) -> None:  # fmt: skip
    spec = {"limit": 3, "period": period, "timezone": zone}
    if anchor is not None:
        spec["anchor"] = anchor
    policy = quota(settings, **spec)
    start = at(zone, *inside)
    ends = at(zone, *end)
    with clock(start) as traveller:
        assert spend(policy, 4) == [True, True, True, False]
        denied = policy.hit(ID)
        left = ends.timestamp() - start.timestamp()  # (not ends - start: wall-clock hours)
        assert denied.retry_after == pytest.approx(left, abs=0.002)
        assert denied.reset_after == pytest.approx(left, abs=0.002)
        assert denied.window == hours * 3600
        assert policy.peek(ID).remaining == 0
        # One ms before the end: still this period.
        traveller.shift(left - 0.001)
        assert not policy.hit(ID).allowed
        traveller.shift(0.001)  # the end: a new period, a new counter
        first = policy.hit(ID)
        assert first.allowed and first.remaining == 2
        assert spend(policy, 3) == [True, True, False]
        keys = sorted(redis_client.keys("rl:q:*"))
        assert len(keys) == 2
        # Each key is named by its period's start, and dies at most a day after its end.
        starts = sorted(int(k.rsplit(b":", 1)[1]) for k in keys)
        assert starts[1] == int(ends.timestamp())
        # The new period's key lives the time left in it on this (moved) clock, plus
        # at most a day, never less.
        ttl = redis_client.pttl(keys[starts.index(int(ends.timestamp()))])
        left_ms = first.reset_after * 1000
        assert left_ms - 100 <= ttl <= left_ms + 86_400_000
        assert first.window == first.reset_after  # (at the very start of its period)


def test_freezegun_moves_the_quota_clock_too(settings: Any) -> None:
    import freezegun

    policy = quota(settings, limit=2, period="week", timezone="America/New_York")
    # Sunday 2026-03-08, 23:59:59 in New York (the week began Monday 2 March; the day
    # is 23 hours long): the next week begins at midnight.
    start = at("America/New_York", 2026, 3, 8, 23, 59, 59)
    with freezegun.freeze_time(start) as frozen:
        assert spend(policy, 3) == [True, True, False]
        denied = policy.hit(ID)
        assert denied.retry_after == 1.0
        assert denied.window == 7 * 86_400 - 3600  # the week that lost an hour
        frozen.tick(dt.timedelta(seconds=1))
        fresh = policy.hit(ID)
        assert fresh.allowed and fresh.window == 7 * 86_400
