"""``rate: None`` (never limits, no Redis) and ``"0/<period>"`` (denies all), both front doors.

Also DRF's and django-ratelimit's rate strings end to end, and what
``manage.py check`` says of them. Views: ``tests/sites/urls_syntax.py``.
"""

from __future__ import annotations

import logging

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient, Client

from django_rl import Decision, get_policy
from django_rl.checks.system import check_settings
from django_rl.core.rates import MAX_COUNT
from tests.conftest import start_of_fresh_window
from tests.sites.urls_syntax import POLICIES
from tests.support.sf_headers import policies, ratelimit

RATE_HEADERS = {"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining"}


@pytest.fixture(autouse=True)
def _syntax_views(settings):
    settings.ROOT_URLCONF = "tests.sites.urls_syntax"
    settings.DJANGO_RL = {"HEADERS": "both", "POLICIES": POLICIES}


def commands(redis_client) -> int:
    """Return the commands the server has run, INFO (which reads them) aside."""
    stats = redis_client.info("commandstats")
    return sum(int(s["calls"]) for name, s in stats.items() if name != "cmdstat_info")


def get(url: str, n: int = 1, **extra):
    client = Client()
    return [client.get(url, **extra) for _ in range(n)]


def get_async(url: str, n: int = 1):
    async def send():
        client = AsyncClient()
        return [await client.get(url) for _ in range(n)]

    return async_to_sync(send)()


@pytest.mark.parametrize("name", ["off", "off_bucket"])
@pytest.mark.parametrize("door", ["", "async/", "api/"])
def test_rate_none_never_limits_never_asks_redis_and_sends_no_header(redis_client, name, door):
    url = f"/{name}/{door}"
    before = commands(redis_client)
    responses = get_async(url, 20) if door == "async/" else get(url, 20)
    assert [r.status_code for r in responses] == [200] * 20
    assert [RATE_HEADERS & set(r.headers) for r in responses] == [set()] * 20
    assert commands(redis_client) - before == 0


def test_rate_none_beside_a_counting_policy_leaves_only_that_one_in_the_headers(redis_client):
    start_of_fresh_window(redis_client, 60_000, min_left_ms=10_000)
    responses = get("/off-and-minute/", 6)
    assert [r.status_code for r in responses] == [200] * 5 + [429]
    assert [policies(r) for r in responses] == [{"per_minute": {"q": 5, "w": 60}}] * 6
    assert [ratelimit(r)[1]["r"] for r in responses] == [4, 3, 2, 1, 0, 0]


@pytest.mark.parametrize(
    ("name", "period"), [("blocked", 60), ("blocked_bucket", 10)], ids=["0/m", "0/10"]
)
@pytest.mark.parametrize("door", ["", "async/", "api/"])
def test_rate_zero_denies_every_request_with_retry_after_the_period(
    redis_client, name, period, door
):
    url = f"/{name}/{door}"
    before = commands(redis_client)
    responses = get_async(url, 3) if door == "async/" else get(url, 3)
    assert [r.status_code for r in responses] == [429] * 3
    for response in responses:
        assert response["Retry-After"] == str(period)
        assert policies(response) == {name: {"q": 0, "w": period}}
        assert ratelimit(response) == (name, {"r": 0, "t": period})
        assert response["X-RateLimit-Limit"] == "0"
        assert response["X-RateLimit-Remaining"] == "0"
    if door == "api/":
        assert responses[0].json() == {
            "detail": f"Request was throttled. Expected available in {period} seconds."
        }
    # Static: decided without Redis.
    assert commands(redis_client) - before == 0


def test_a_cost_above_every_limit_is_no_error_for_none_or_zero(settings, caplog):
    with caplog.at_level(logging.DEBUG, logger="django_rl"):
        assert get("/off/heavy/")[0].status_code == 200
        assert get("/blocked/heavy/")[0].status_code == 429
    # No E014 line: denying everything is what 0/m is for. (The denial itself
    # is one line of the denial log, as every denied request is.)
    assert [r for r in caplog.records if r.name == "django_rl"] == []
    assert len([r for r in caplog.records if r.name == "django_rl.denials"]) == 1
    assert [e.msg for e in check_settings() if e.id == "django_rl.E014"] == []


def test_programmatic_hits_of_none_and_zero():
    off, blocked = get_policy("off"), get_policy("blocked_bucket")
    everything = Decision(True, 0, 0, 0.0, 0.0, "off")
    nothing = Decision(False, 0, 0, 10.0, 10.0, "blocked_bucket", window=10)
    assert [off.hit("ip:192.0.2.1"), off.hit("ip:192.0.2.1", cost=MAX_COUNT + 1)] == [
        everything
    ] * 2
    assert off.peek("ip:192.0.2.1") == everything
    assert [blocked.hit("ip:192.0.2.1"), blocked.hit("ip:192.0.2.1", cost=7)] == [nothing] * 2
    assert blocked.peek("ip:192.0.2.1") == nothing
    assert (off.reset("ip:192.0.2.1"), blocked.reset("ip:192.0.2.1")) == (0, 0)
    assert (off.algorithm.name, off.limit, repr(off)) == (
        "unlimited",
        0,
        "<Policy 'off': unlimited>",
    )
    assert (blocked.algorithm.name, blocked.limit) == ("deny_all", 0)
    for policy in (off, blocked):
        with pytest.raises(ValueError, match="cost must be a whole number of at least 1, not 0"):
            policy.hit("ip:192.0.2.1", cost=0)


@pytest.mark.parametrize("door", ["", "async/", "api/"])
def test_a_drf_rate_string_limits_through_both_front_doors(redis_client, door):
    start_of_fresh_window(redis_client, 60_000, min_left_ms=10_000)
    url = f"/drf_minute/{door}"
    responses = get_async(url, 4) if door == "async/" else get(url, 4)
    assert [r.status_code for r in responses] == [200] * 3 + [429]
    assert policies(responses[-1]) == {"drf_minute": {"q": 3, "w": 60}}
    assert 1 <= int(responses[-1]["Retry-After"]) <= 60


@pytest.mark.parametrize(
    "rate",
    [None, "0/m", "0/10", "3/sec", "6/min", "1000/hour", "1/day", "5/minutes", "100/10", "5/w"],
)
@pytest.mark.parametrize("algorithm", ["fixed_window", "sliding_log", "token_bucket"])
def test_every_rate_form_passes_the_checks(settings, rate, algorithm):
    spec = {"algorithm": algorithm, "rate": rate}
    if algorithm == "token_bucket":
        spec["capacity"] = 3
    settings.ROOT_URLCONF = "tests.sites.urls_without_limits"
    settings.DJANGO_RL = {"POLICIES": {"p": spec}}
    assert check_settings() == []
    assert get_policy("p").hit("ip:192.0.2.1").allowed is (rate != "0/m" and rate != "0/10")


def test_rate_none_still_checks_a_token_buckets_capacity(settings):
    settings.ROOT_URLCONF = "tests.sites.urls_without_limits"
    settings.DJANGO_RL = {
        "POLICIES": {"p": {"algorithm": "token_bucket", "rate": None, "capacity": 0}}
    }
    assert [(e.id, e.msg) for e in check_settings()] == [
        (
            "django_rl.E010",
            "DJANGO_RL['POLICIES']['p']: capacity must be between 1 and 1,000,000,000, not 0",
        )
    ]
