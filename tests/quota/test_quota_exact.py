"""Exact at the boundary: threads spending a 100-a-day quota across midnight in New York.

On the Redis server's clock (a Valkey server whose clock libfaketime puts
just before midnight) and on this host's (``CLOCK: "app"``, time-machine
ticking from just before midnight): exactly 100 hits are let through on
each side, counted in one key per period. Also: the first hit against a
server whose clock is days away from this host's finds its period.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis
import time_machine

from django_rl import get_policy
from django_rl.algorithms.quota import GRACE_MS
from django_rl.policies.policy import Policy
from tests.conftest import point_caches_at, server_ms, sleep_until
from tests.support.fake_clock import ServerUnderFakeClock

pytestmark = pytest.mark.slow

NEW_YORK = ZoneInfo("America/New_York")
LIMIT = 100
THREADS = 8
ID = "ip:198.51.100.7"
SPEC = {"algorithm": "quota", "limit": LIMIT, "period": "day", "timezone": "America/New_York"}


@pytest.fixture
def clock_server(settings: Any) -> Iterator[ServerUnderFakeClock]:
    server = ServerUnderFakeClock()
    server.start()
    point_caches_at(settings, server, 2.0)
    try:
        yield server
    finally:
        server.close()


def hammer(policy: Policy, seconds: float) -> tuple[int, int]:
    """Hit from :data:`THREADS` threads for ``seconds``; return the hits let through
    before midnight and after it (told by the wait to the period's end: under an
    hour before it, about a day after)."""
    deadline = time.monotonic() + seconds
    allowed: list[list[float]] = [[] for _ in range(THREADS)]

    def run(i: int) -> None:
        while time.monotonic() < deadline:
            decision = policy.hit(ID)
            if decision.allowed:
                allowed[i].append(decision.reset_after)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    resets = [reset for each in allowed for reset in each]
    return sum(r < 3600 for r in resets), sum(r > 80_000 for r in resets)


def counts(client: redis.Redis) -> dict[int, int]:
    return {int(key.rsplit(b":", 1)[1]): int(client.get(key) or 0) for key in client.keys("rl:q:*")}


def jump_to(server: ServerUnderFakeClock, client: redis.Redis, target: int) -> None:
    """Step the server's clock to about ``target`` (s), and wait until it reads so."""
    server.jump(target - server_ms(client) // 1000)
    deadline = time.monotonic() + 3
    while abs(server_ms(client) / 1000 - target) > 1.5:
        assert time.monotonic() < deadline, "the server's clock did not move"
        time.sleep(0.02)


def midnight(day: dt.date) -> int:
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=NEW_YORK).timestamp())


@pytest.mark.parametrize(
    ("day", "hours"),
    [(dt.date(2027, 1, 1), 24), (dt.date(2027, 3, 14), 23), (dt.date(2027, 11, 7), 25)],
)
def test_server_clock_exactly_the_limit_on_each_side_of_midnight(
    settings: Any, clock_server: ServerUnderFakeClock, day: dt.date, hours: int
) -> None:
    settings.DJANGO_RL = {"POLICIES": {"q": SPEC}}
    policy = get_policy("q")
    client = clock_server.client()
    # Put the server's clock 2 s before midnight in New York, then start on a
    # whole second of it (hits to then count before midnight).
    boundary = midnight(day)
    jump_to(clock_server, client, boundary - 2)
    sleep_until(client, (boundary - 1) * 1000 - 500)
    allowed = hammer(policy, 2.0)
    assert server_ms(client) > boundary * 1000 + 300  # the run crossed midnight
    previous = midnight(day - dt.timedelta(days=1))
    assert counts(client) == {previous: LIMIT, boundary: LIMIT}
    assert allowed == (LIMIT, LIMIT)
    # The day after midnight is 23, 24 or 25 hours long, and the decisions say so.
    after = policy.peek(ID)
    assert after.window == hours * 3600 and after.remaining == 0
    end = midnight(day + dt.timedelta(days=1))
    assert after.retry_after == pytest.approx(end - server_ms(client) / 1000, abs=1)
    # The keys die an hour after their period's end on the server's clock.
    ttl = client.pttl(f"{policy.key(ID)}:{boundary}")
    assert abs((end * 1000 + GRACE_MS - server_ms(client)) - ttl) < 1000
    client.close()


def test_app_clock_exactly_the_limit_on_each_side_of_midnight(
    settings: Any, redis_client: redis.Redis
) -> None:
    settings.DJANGO_RL = {"CLOCK": "app", "POLICIES": {"q": SPEC}}
    policy = get_policy("q")
    boundary = midnight(dt.date(2027, 3, 15))
    start = dt.datetime.fromtimestamp(boundary - 0.7, dt.timezone.utc)
    with time_machine.travel(start, tick=True):
        allowed = hammer(policy, 1.5)
        assert time.time() > boundary + 0.3
    previous = midnight(dt.date(2027, 3, 14))
    assert counts(redis_client) == {previous: LIMIT, boundary: LIMIT}
    assert allowed == (LIMIT, LIMIT)


def test_a_server_clock_days_away_is_found_and_then_kept(
    settings: Any, clock_server: ServerUnderFakeClock
) -> None:
    settings.DJANGO_RL = {
        "POLICIES": {
            "q": {**SPEC, "limit": 2},
            "warm": {"algorithm": "sliding_log", "rate": "5/m", "key": "ip"},
        }
    }
    policy = get_policy("q")
    client = clock_server.client()
    jump_to(clock_server, client, server_ms(client) // 1000 + 40 * 86_400)  # 40 days ahead
    get_policy("warm").hit(ID)  # connections made, the server learned (it tells no clock)

    def times() -> int:
        """``TIME`` commands run, inside scripts too: each run of the quota script reads
        it once (round trips of the server are not counted here: the suite's other
        threads write to it)."""
        return int(client.info("commandstats")["cmdstat_time"]["calls"])

    before = times()
    decisions = [policy.hit(ID)]
    # The first hit ran the script twice (its estimate was this host's clock, 40 days off) ...
    assert times() - before == 2
    before = times()
    decisions += [policy.hit(ID) for _ in range(2)]
    # ... the others once each, and no TIME of their own: the server's clock is known.
    assert times() - before == 2
    assert [d.allowed for d in decisions] == [True, True, False]
    (key,) = client.keys("rl:q:*")
    start = int(key.rsplit(b":", 1)[1])
    server_day = dt.datetime.fromtimestamp(server_ms(client) / 1000, NEW_YORK).date()
    assert start == midnight(server_day)
    client.close()


@pytest.mark.parametrize(
    ("period", "zone", "end"),
    [
        ("week", "Europe/London", dt.datetime(2027, 3, 29)),  # a Monday; the week lost an hour
        ("month", "Australia/Sydney", dt.datetime(2027, 3, 1)),  # February's end
        ("year", "America/New_York", dt.datetime(2027, 1, 1)),
    ],
)
def test_server_clock_week_month_and_year_ends(
    settings: Any, clock_server: ServerUnderFakeClock, period: str, zone: str, end: dt.datetime
) -> None:
    spec = {"algorithm": "quota", "limit": 3, "period": period, "timezone": zone, "key": "ip"}
    settings.DJANGO_RL = {"POLICIES": {"q": spec}}
    policy = get_policy("q")
    client = clock_server.client()
    boundary = int(end.replace(tzinfo=ZoneInfo(zone)).timestamp())
    jump_to(clock_server, client, boundary - 2)
    sleep_until(client, (boundary - 1) * 1000)
    before = [policy.hit(ID) for _ in range(4)]
    assert [d.allowed for d in before] == [True, True, True, False]
    assert before[3].retry_after == pytest.approx(boundary - server_ms(client) / 1000, abs=0.5)
    sleep_until(client, boundary * 1000 + 50)
    after = [policy.hit(ID) for _ in range(4)]
    assert [d.allowed for d in after] == [True, True, True, False]
    # One counter per period, each named by its start (the one before: its length back).
    assert before[0].window is not None
    assert counts(client) == {boundary - before[0].window: 3, boundary: 3}
    client.close()
