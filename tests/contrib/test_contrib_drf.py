"""The DRF drop-in (``django_rl.contrib.drf``) behaves as DRF's own throttles document.

Every behaviour of ``rest_framework.throttling``'s classes, through DRF's
views (``APIView.check_throttles``: every throttle sees every request, the
longest ``wait()`` becomes Retry-After), with the timing read on the Redis
server's clock: the drop-in takes time from Redis, so the tests align to it
and leave margins for a busy machine instead of patching ``timer``.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from typing import ClassVar
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.http import HttpRequest
from django.test import override_settings
from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.test import APIRequestFactory, force_authenticate

from django_rl.contrib import drf_policies
from django_rl.contrib.drf import (
    AnonRateThrottle,
    ScopedRateThrottle,
    SimpleRateThrottle,
    ThrottleRateError,
    UserRateThrottle,
)
from django_rl.policies.registry import policies_named, policy_names
from tests.conftest import server_ms, sleep_until
from tests.policies.test_fallback import dead_redis  # noqa: F401 (a fixture)
from tests.sites import views_contrib_drf as views

pytestmark = pytest.mark.django_db

RATES = {"anon": "3/min", "user": "4/min", "uploads": "2/min", "off": None}
FACTORY = APIRequestFactory()


@pytest.fixture(autouse=True)
def _rates(settings):
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": dict(RATES)}
    settings.DJANGO_RL = {}


def get(view, *, user=None, ip="192.0.2.1", **headers):
    request = FACTORY.get("/", REMOTE_ADDR=ip, **headers)
    if user is not None:
        force_authenticate(request, user)
    return view.as_view()(request)


def statuses(view, n, **kwargs):
    return [get(view, **kwargs).status_code for _ in range(n)]


def retry_bounds(first_before: int, first_after: int, hit_before: int, hit_after: int, period_ms):
    """Return the Retry-After (whole seconds) a denial may carry, from Redis clock readings.

    The oldest hit was made between ``first_before`` and ``first_after``, the
    denied one between ``hit_before`` and ``hit_after``: the wait is the
    period less the time between them, rounded up.
    """
    least = period_ms - (hit_after - first_before)
    most = period_ms - (hit_before - first_after)
    return math.ceil(least / 1000), math.ceil(most / 1000)


def window_left(period_ms, first_before, first_after, hit_before, hit_after, wait) -> bool:
    """Return whether ``wait`` (seconds) is the period less the time between the two hits."""
    least = (period_ms - (hit_after - first_before)) / 1000
    most = (period_ms - (hit_before - first_after)) / 1000
    return least <= wait <= most


# -- the classes' settings and hooks ----------------------------------------


def test_anon_throttle_denies_past_the_rate_with_drf_429_and_our_headers():
    responses = [get(views.AnonView) for _ in range(4)]
    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    denied = responses[-1]
    assert 58 <= int(denied["Retry-After"]) <= 60
    assert "Request was throttled" in denied.data["detail"]
    assert denied["RateLimit-Policy"] == '"drf.anon";q=3;w=60'
    assert denied["RateLimit"].startswith('"drf.anon";r=0;t=')
    assert responses[1]["RateLimit"].startswith('"drf.anon";r=1;t=')


def test_anon_throttle_skips_authenticated_users_and_counts_per_address():
    user = User.objects.create(username="a")
    assert statuses(views.AnonView, 5, user=user) == [200] * 5
    assert statuses(views.AnonView, 4, ip="192.0.2.1") == [200, 200, 200, 429]
    assert statuses(views.AnonView, 1, ip="192.0.2.2") == [200]


def test_user_throttle_counts_per_user_and_anonymous_per_address():
    alice, bob = User.objects.create(username="a"), User.objects.create(username="b")
    assert statuses(views.UserView, 5, user=alice) == [200] * 4 + [429]
    assert statuses(views.UserView, 1, user=bob) == [200]
    assert statuses(views.UserView, 5) == [200] * 4 + [429]


def test_cache_keys_are_drfs():
    request = Request(HttpRequest())
    request.META["REMOTE_ADDR"] = "192.0.2.9"
    assert AnonRateThrottle().get_cache_key(request, None) == "throttle_anon_192.0.2.9"
    assert UserRateThrottle().get_cache_key(request, None) == "throttle_user_192.0.2.9"
    assert AnonRateThrottle().get_cache_key(Request(HttpRequest()), {}) == "throttle_anon_None"
    user = User.objects.create(username="k")
    force_authenticate(request, user)
    request.user = user
    assert AnonRateThrottle().get_cache_key(request, None) is None
    assert UserRateThrottle().get_cache_key(request, None) == f"throttle_user_{user.pk}"

    class DummyView:
        throttle_scope = "uploads"

    throttle = ScopedRateThrottle()
    assert throttle.allow_request(request, DummyView()) is True
    assert throttle.get_cache_key(request, DummyView()) == f"throttle_uploads_{user.pk}"
    assert throttle.key == f"throttle_uploads_{user.pk}"
    assert (throttle.rate, throttle.num_requests, throttle.duration) == ("2/min", 2, 60)


def test_parse_rate_takes_drfs_periods():
    throttle = AnonRateThrottle()
    assert throttle.parse_rate(None) == (None, None)
    cases = {"3/s": 1, "3/sec": 1, "3/m": 60, "3/min": 60, "3/h": 3600, "3/hour": 3600}
    cases |= {"3/d": 86400, "3/day": 86400, "3/second": 1, "3/minutes": 60, "3/days": 86400}
    for rate, seconds in cases.items():
        assert throttle.parse_rate(rate) == (3, seconds)
    assert throttle.parse_rate("0/m") == (0, 60)


@pytest.mark.parametrize("rate", ["3", "x/m", "3/mango", "3/-1s", "", 3])
def test_parse_rate_errors_are_improperly_configured_and_value_errors(rate):
    with pytest.raises(ImproperlyConfigured) as caught:
        AnonRateThrottle().parse_rate(rate)
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, ThrottleRateError)


def test_get_rate_errors_are_drfs():
    throttle = AnonRateThrottle()
    throttle.scope = None
    message = r"You must set either `\.scope` or `\.rate` for 'AnonRateThrottle' throttle"
    with pytest.raises(ImproperlyConfigured, match=message):
        throttle.get_rate()

    class Nowhere(AnonRateThrottle):
        scope = "nowhere"

    with pytest.raises(ImproperlyConfigured, match="No default throttle rate set for 'nowhere'"):
        Nowhere()


def test_a_none_rate_is_not_throttled_and_asks_nothing(redis_client):
    class Off(AnonRateThrottle):
        scope = "off"

    throttle = Off()
    assert (throttle.rate, throttle.num_requests, throttle.duration) == (None, None, None)
    assert throttle.allow_request(request={}, view={}) is True
    assert throttle.wait() is None
    assert redis_client.dbsize() == 0


def test_the_request_records_its_decisions_and_whether_it_was_limited():
    class Constant(SimpleRateThrottle):
        rate = "1/m"

        def get_cache_key(self, request, view):
            return "one"

    request = Request(FACTORY.get("/"))
    assert Constant().allow_request(request, None) is True
    assert request.limited is False
    assert Constant().allow_request(request, None) is False
    assert request.limited is True
    assert [(d.allowed, d.policy) for d in request.django_rl_decisions] == [
        (True, "drf"),
        (False, "drf"),
    ]
    # Not a request at all (DRF's own tests pass {}): decided, nothing recorded.
    assert Constant().allow_request({}, {}) is False


def test_get_cache_key_must_be_overridden_and_none_means_not_throttled():
    class Bare(SimpleRateThrottle):
        rate = "1/m"

    with pytest.raises(NotImplementedError):
        Bare().get_cache_key({}, {})
    throttle = Bare()
    throttle.get_cache_key = lambda *args: None  # type: ignore[method-assign]
    assert [throttle.allow_request(request={}, view={}) for _ in range(3)] == [True] * 3


def test_wait_from_history_set_by_hand_is_drfs_arithmetic():
    throttle = AnonRateThrottle()
    throttle.num_requests, throttle.duration, throttle.history = 1, 60, []
    assert throttle.wait() == 30.0
    throttle.now = throttle.timer()
    throttle.history = [throttle.timer() for _ in range(3)]
    assert throttle.wait() is None
    throttle.now = 100.0
    throttle.num_requests, throttle.history = 3, [99.0, 90.0]
    assert throttle.wait() == (60 - 10) / 2


def test_a_custom_get_cache_key_is_the_identity():
    assert statuses(views.TenantView, 3, HTTP_X_TENANT="acme", ip="192.0.2.1") == [200, 200, 429]
    # Another address of the same tenant shares its count; another tenant has its own.
    assert statuses(views.TenantView, 1, HTTP_X_TENANT="acme", ip="192.0.2.7") == [429]
    assert statuses(views.TenantView, 1, HTTP_X_TENANT="other") == [200]
    assert statuses(views.TenantView, 5) == [200] * 5  # no tenant: None, not throttled


# -- scopes -------------------------------------------------------------------


def test_scoped_throttle_counts_each_scope_at_its_rate():
    assert statuses(views.XView, 4) == [200, 200, 200, 429]
    assert statuses(views.YView, 2) == [200, 429]
    assert statuses(views.XView, 1, ip="192.0.2.2") == [200]


def test_scoped_views_without_a_scope_or_with_a_none_rate_are_not_throttled(redis_client):
    assert statuses(views.UnscopedView, 10) == [200] * 10
    assert statuses(views.FreeView, 10) == [200] * 10
    assert redis_client.dbsize() == 0


def test_scoped_throttle_reads_default_throttle_rates():
    assert statuses(views.SettingsScopedView, 3) == [200, 200, 429]


def test_an_unknown_scope_is_drfs_error():
    class Elsewhere(views.Api):
        throttle_classes: ClassVar[list[type]] = [ScopedRateThrottle]
        throttle_scope = "elsewhere"

    with pytest.raises(ImproperlyConfigured, match="No default throttle rate set for 'elsewhere'"):
        get(Elsewhere)


# -- settings -----------------------------------------------------------------


def test_override_settings_changes_the_rates_on_the_next_request():
    assert statuses(views.AnonView, 4) == [200, 200, 200, 429]
    with override_settings(REST_FRAMEWORK={"DEFAULT_THROTTLE_RATES": {"anon": "5/min"}}):
        # Another rate: its own state (its fingerprint), so 5 more.
        assert statuses(views.AnonView, 6) == [200] * 5 + [429]
        assert AnonRateThrottle.THROTTLE_RATES["anon"] == "5/min"
    with override_settings(REST_FRAMEWORK={"DEFAULT_THROTTLE_RATES": {"anon": None}}):
        assert statuses(views.AnonView, 3) == [200] * 3
    assert AnonRateThrottle.THROTTLE_RATES["anon"] == "3/min"


def test_the_settings_fixture_changes_the_rates(settings):
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "1/min"}}
    assert statuses(views.AnonView, 2) == [200, 429]


def test_patch_dict_and_patch_object_on_throttle_rates():
    with mock.patch.dict(AnonRateThrottle.THROTTLE_RATES, {"anon": "1/min"}):
        assert AnonRateThrottle().rate == "1/min"
        assert statuses(views.AnonView, 2) == [200, 429]
    assert AnonRateThrottle().rate == "3/min"
    assert api_settings.DEFAULT_THROTTLE_RATES == RATES
    with mock.patch.object(AnonRateThrottle, "THROTTLE_RATES", {"anon": "2/min"}):
        assert AnonRateThrottle().rate == "2/min"
    assert AnonRateThrottle().rate == "3/min"


def test_a_subclass_throttle_rates_attribute_wins():
    class Own(AnonRateThrottle):
        THROTTLE_RATES: ClassVar[dict[str, str]] = {"anon": "7/h"}

    assert (Own().num_requests, Own().duration) == (7, 3600)
    assert AnonRateThrottle().num_requests == 3


def test_a_class_rate_changed_at_run_time_applies_to_new_throttles():
    assert statuses(views.SecondsView, 4) == [200, 200, 200, 429]
    with mock.patch.object(views.User3SecRateThrottle, "rate", "1/sec"):
        # 1/sec is another rate with its own state: one allowed, then denied.
        assert statuses(views.SecondsView, 3) == [200, 429, 429]


XFF = "0.0.0.0, 1.1.1.1, 2.2.2.2"


@pytest.mark.parametrize(
    ("num_proxies", "ident"),
    [
        (None, "0.0.0.0,1.1.1.1,2.2.2.2"),
        (0, "3.3.3.3"),
        (1, "2.2.2.2"),
        (2, "1.1.1.1"),
        (5, "0.0.0.0"),
    ],
)
def test_num_proxies_is_drfs(settings, num_proxies, ident):
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": RATES, "NUM_PROXIES": num_proxies}
    request = Request(FACTORY.get("/", HTTP_X_FORWARDED_FOR=XFF, REMOTE_ADDR="3.3.3.3"))
    throttle = AnonRateThrottle()
    assert throttle.allow_request(request, None) is True
    assert throttle.key == f"throttle_anon_{ident}"


def test_num_proxies_one_resists_spoofing_and_tells_clients_apart(settings):
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "1/d"}, "NUM_PROXIES": 1}
    assert get(views.AnonView, HTTP_X_FORWARDED_FOR=XFF).status_code == 200
    spoofed = get(views.AnonView, HTTP_X_FORWARDED_FOR="4.4.4.4, 5.5.5.5, 2.2.2.2")
    assert spoofed.status_code == 429
    other = get(views.AnonView, HTTP_X_FORWARDED_FOR="0.0.0.0, 1.1.1.1, 7.7.7.7")
    assert other.status_code == 200


def test_num_proxies_none_counts_the_whole_forwarded_header(settings):
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "1/d"}, "NUM_PROXIES": None}
    assert get(views.AnonView, HTTP_X_FORWARDED_FOR=XFF).status_code == 200
    assert get(views.AnonView, HTTP_X_FORWARDED_FOR="4.4.4.4, 2.2.2.2").status_code == 200
    assert get(views.AnonView, HTTP_X_FORWARDED_FOR="0.0.0.0,1.1.1.1, 2.2.2.2").status_code == 429


# -- timing, on the Redis clock -----------------------------------------------


def test_retry_after_of_a_minute_rate(redis_client):
    before = server_ms(redis_client)
    first = get(views.MinuteView)
    after_first = server_ms(redis_client)
    assert [first.status_code, *statuses(views.MinuteView, 2)] == [200, 200, 200]
    hit_before = server_ms(redis_client)
    denied = get(views.MinuteView)
    hit_after = server_ms(redis_client)
    assert denied.status_code == 429
    least, most = retry_bounds(before, after_first, hit_before, hit_after, 60_000)
    assert least <= int(denied["Retry-After"]) <= most
    assert most <= 60


def test_next_rate_remains_constant_if_followed(redis_client):
    """A client that keeps to DRF's pace (3/2s: one per 2/3 s) is never throttled."""

    class Paced(views.Api):
        throttle_classes: ClassVar[list[type]] = [views.TwoPerTwoSeconds]

    start = server_ms(redis_client)
    codes = []
    for step in range(6):
        sleep_until(redis_client, start + step * 1050)
        codes.append(get(Paced).status_code)
    assert codes == [200] * 6


def test_wait_falls_as_the_redis_clock_runs(redis_client):
    throttle_class = views.TwoPerTwoSeconds
    request = Request(FACTORY.get("/", REMOTE_ADDR="192.0.2.3"))
    before = server_ms(redis_client)
    assert throttle_class().allow_request(request, None) is True
    after_first = server_ms(redis_client)
    assert throttle_class().allow_request(request, None) is True
    throttle = throttle_class()
    hit_before = server_ms(redis_client)
    assert throttle.allow_request(request, None) is False
    hit_after = server_ms(redis_client)
    wait = throttle.wait()
    assert isinstance(wait, float)
    assert window_left(2000, before, after_first, hit_before, hit_after, wait)
    # 800 ms later (Redis clock) the wait is 800 ms shorter.
    sleep_until(redis_client, hit_after + 800)
    later = throttle_class()
    hit_before = server_ms(redis_client)
    assert later.allow_request(request, None) is False
    hit_after = server_ms(redis_client)
    wait = later.wait()
    assert window_left(2000, before, after_first, hit_before, hit_after, wait)
    assert wait <= 1.2 + 0.001
    # Once the first hit has left the window, one more is allowed.
    sleep_until(redis_client, after_first + 2000 + 5)
    assert throttle_class().allow_request(request, None) is True


def test_several_throttles_each_count_what_they_allowed(redis_client):
    """DRF's own double-throttle scenario (3/sec and 6/min), on the Redis clock."""
    before = server_ms(redis_client)
    first = get(views.DoubleView)
    after_first = server_ms(redis_client)
    responses = [first, *(get(views.DoubleView) for _ in range(3))]
    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    assert responses[-1]["Retry-After"] == "1"
    # The 3/sec throttle denied the 4th; the 6/min one allowed and counted it.
    sleep_until(redis_client, after_first + 1000 + 5)
    assert statuses(views.DoubleView, 2) == [200, 200]
    hit_before = server_ms(redis_client)
    denied = get(views.DoubleView)
    hit_after = server_ms(redis_client)
    assert denied.status_code == 429  # the 7th: 6/min denies
    least, most = retry_bounds(before, after_first, hit_before, hit_after, 60_000)
    assert least <= int(denied["Retry-After"]) <= most <= 59
    # Two seconds later the wait is two seconds shorter.
    sleep_until(redis_client, hit_after + 2000)
    hit_before = server_ms(redis_client)
    denied = get(views.DoubleView)
    hit_after = server_ms(redis_client)
    least, most = retry_bounds(before, after_first, hit_before, hit_after, 60_000)
    assert least <= int(denied["Retry-After"]) <= most <= 57


def test_request_throttling_expires(redis_client):
    before = server_ms(redis_client)
    assert statuses(views.SecondsView, 4) == [200, 200, 200, 429]
    sleep_until(redis_client, before + 1000 + 300)
    assert statuses(views.SecondsView, 1) == [200]


# -- a replaced timer: the time DRF's tests (and many projects') move by hand ------


class Clock:
    """A clock a test moves by hand, in seconds since the epoch (DRF's ``timer``)."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self, *args: object) -> float:  # as a method (self) or a plain callable
        return self.now


def test_a_replaced_timer_moves_the_window_without_waiting(monkeypatch, redis_client):
    clock = Clock(1_900_000_000.0)  # far from the server's clock: only the timer decides
    monkeypatch.setattr(views.User3SecRateThrottle, "timer", clock)
    assert statuses(views.SecondsView, 4, ip="198.51.100.40") == [200, 200, 200, 429]
    throttle = views.User3SecRateThrottle()
    request = Request(FACTORY.get("/", REMOTE_ADDR="198.51.100.40"))
    request.user = None
    assert throttle.allow_request(request, None) is False
    assert throttle.wait() == 1.0  # the whole second: the three hits are at the timer's now
    assert throttle.now == clock.now  # as DRF sets it
    clock.now += 0.25
    assert throttle.allow_request(request, None) is False
    assert throttle.wait() == 0.75
    # Not the deny cache's answer: it keeps this process's time, not the timer's.
    clock.now += 0.75
    assert statuses(views.SecondsView, 4, ip="198.51.100.40") == [200, 200, 200, 429]
    (key,) = redis_client.scan_iter("rl:drf.seconds:*198.51.100.40*")
    assert 0 < redis_client.pttl(key) <= 1000  # the TTL is the window's, whatever the time


def test_history_and_wait_after_allowed_requests_are_drfs_as_time_moves(redis_client):
    """The drop-in and DRF's own throttle on one moved clock: the same answers, wait(), history."""
    from django.core.cache.backends.locmem import LocMemCache
    from rest_framework import throttling as drf

    clock = Clock(1_900_000_200.0)
    ours = type("Ours", (SimpleRateThrottle,), {"rate": "3/min", "timer": clock})
    theirs = type("Theirs", (drf.SimpleRateThrottle,), {"rate": "3/min", "timer": clock})
    theirs.cache = LocMemCache("drf-history", {})
    for cls in (ours, theirs):
        cls.get_cache_key = lambda self, request, view: "history-client"
    # Requests at +0, +10 and +20 s are allowed, +30 and +59 denied, +61
    # allowed again (the first has left the window), +70 allowed (the second too).
    for step in (0, 10, 20, 30, 59, 61, 70):
        clock.now = 1_900_000_200.0 + step
        mine, drfs = ours(), theirs()
        assert mine.allow_request({}, None) == drfs.allow_request({}, None), step
        assert mine.history == pytest.approx(drfs.history, abs=0.001), step
        assert mine.wait() == pytest.approx(drfs.wait(), abs=0.001), step
        assert mine.now == drfs.now == clock.now
    # After +70: the log holds +20, +61, +70; the oldest leaves in 10 s, one request left.
    assert mine.history == pytest.approx([clock.now, clock.now - 9, clock.now - 50])
    assert mine.wait() == pytest.approx(10 / 1)


def test_wait_after_allowed_requests_is_drfs_pace_on_the_redis_clock(redis_client):
    throttle_class = type("Paced", (AnonRateThrottle,), {"rate": "3/min", "scope": "paced"})
    request = Request(FACTORY.get("/", REMOTE_ADDR="192.0.2.30"))
    first = throttle_class()
    before = server_ms(redis_client)
    assert first.allow_request(request, None) is True
    after_first = server_ms(redis_client)
    # One request in the window: its whole minute left, for 3 requests.
    assert first.wait() == pytest.approx(60 / 3, abs=0.01)
    sleep_until(redis_client, after_first + 300)
    second = throttle_class()
    assert second.allow_request(request, None) is True
    read_before = server_ms(redis_client)
    history = second.history
    read_after = server_ms(redis_client)
    # The log is read at the decisions' clock, a lower bound of the server's
    # time (backends/clock.py): at most its bounds' width early (a few ms on
    # a loaded machine, where a TIME round trip is slow).
    low, high = drf_policies.policy_for("paced", 3, 60).backend.now_range_ms()
    early = high - low
    assert len(history) == 2 and history[0] >= history[1]
    assert before / 1000 - 0.001 <= history[1] <= after_first / 1000 + 0.001
    # The oldest leaves 60 s after it came, counted from when the log was read; 2 requests left.
    least = (60_000 - (read_after - before)) / 1000 / 2
    most = (60_000 - (read_before - early - after_first)) / 1000 / 2
    assert least - 0.001 <= second.wait() <= most + 0.001


def test_history_is_empty_when_nothing_was_decided_or_redis_cannot_answer(dead_redis):  # noqa: F811
    throttle = AnonRateThrottle()
    assert throttle.history == []  # nothing decided: DRF's empty history
    request = Request(FACTORY.get("/", REMOTE_ADDR="192.0.2.31"))  # CACHES: a dead Redis
    assert throttle.allow_request(request, None) is True  # FAIL_OPEN
    assert throttle.decision is not None and throttle.decision.degraded
    assert throttle.history == []
    assert throttle.wait() == 60 / 4  # DRF's pace of an empty window: 3 requests left, + 1


def test_a_timer_set_as_drfs_tests_set_it(monkeypatch):
    """``cls.timer = lambda self: value`` on each class of a view (DRF's own tests' helper)."""
    for cls in views.DoubleView.throttle_classes:
        monkeypatch.setattr(cls, "timer", lambda self: 1_900_000_100.0)
    assert statuses(views.DoubleView, 4, ip="198.51.100.41") == [200, 200, 200, 429]
    for cls in views.DoubleView.throttle_classes:
        monkeypatch.setattr(cls, "timer", lambda self: 1_900_000_101.0)
    # 3/sec has room again. DRF asks every throttle, and each counts what it
    # allowed: 6/min allowed all 4 of the first second, so 2 more fit.
    assert statuses(views.DoubleView, 4, ip="198.51.100.41") == [200, 200, 429, 429]
    for cls in views.DoubleView.throttle_classes:
        monkeypatch.setattr(cls, "timer", lambda self: 1_900_000_102.0)
    assert statuses(views.DoubleView, 1, ip="198.51.100.41") == [429]  # the minute is full


def test_a_throttle_with_the_default_timer_keeps_the_server_clock(monkeypatch, redis_client):
    monkeypatch.setattr(views.User3SecRateThrottle, "timer", Clock(1_900_000_200.0))
    assert statuses(views.SecondsView, 1, ip="198.51.100.42") == [200]
    monkeypatch.undo()
    before = server_ms(redis_client)
    assert statuses(views.SecondsView, 4, ip="198.51.100.43") == [200, 200, 200, 429]
    (key,) = redis_client.scan_iter("rl:drf.seconds:*198.51.100.43*")
    ((_, score),) = redis_client.zrange(key, -1, -1, withscores=True)
    assert before <= score <= server_ms(redis_client)  # the server's time, not the timer's


# -- outages, reset, admin -------------------------------------------------------


def test_fail_open_allows_when_redis_cannot_answer(settings, dead_redis):  # noqa: F811
    assert statuses(views.AnonView, 5) == [200] * 5


def test_fail_closed_denies_when_redis_cannot_answer(settings, dead_redis):  # noqa: F811
    settings.DJANGO_RL = {"FAIL_OPEN": False}
    denied = get(views.AnonView)
    assert denied.status_code == 429
    assert denied["Retry-After"] == "1"


def test_the_drop_ins_policies_are_listed_like_any_other(settings):
    settings.REST_FRAMEWORK = {
        "DEFAULT_THROTTLE_CLASSES": [
            "django_rl.contrib.drf.AnonRateThrottle",
            "django_rl.contrib.drf.UserRateThrottle",
        ],
        "DEFAULT_THROTTLE_RATES": dict(RATES),
    }
    drf_policies._policies.clear()  # a process that has decided nothing yet
    names = policy_names()
    assert {"drf.anon", "drf.user", "drf.uploads"} <= set(names)
    assert "drf.off" not in names
    assert statuses(views.SecondsView, 1) == [200]
    assert "drf.seconds" in policy_names()
    [anon] = policies_named("drf.anon")
    assert (anon.algorithm.name, anon.limit, anon.rate) == ("sliding_log", 3, "3/m")


def test_reset_through_the_policy_clears_a_drf_key():
    assert statuses(views.AnonView, 4) == [200, 200, 200, 429]
    [anon] = policies_named("drf.anon")
    assert anon.reset("throttle_anon_192.0.2.1") == 1
    assert statuses(views.AnonView, 4) == [200, 200, 200, 429]


def test_manage_py_ratelimit_lists_and_resets_drf_policies(capsys):
    assert statuses(views.AnonView, 4) == [200, 200, 200, 429]
    call_command("ratelimit", "policies")
    out = capsys.readouterr().out
    assert "drf.anon" in out and "sliding_log" in out


def test_the_admins_live_counters_show_and_reset_drf_throttles(admin_client):
    assert statuses(views.AnonView, 4) == [200, 200, 200, 429]
    data_url = "/admin/django_rl/livecounter/data/"
    rows = admin_client.get(data_url).json()["rows"]
    [row] = [r for r in rows if r["policy"] == "drf.anon"]
    assert (row["identity"], row["algorithm"], row["rate"], row["limit"]) == (
        "throttle_anon_192.0.2.1",
        "sliding_log",
        "3/m",
        3,
    )
    assert (row["used"], row["remaining"], row["denied"]) == (3, 0, True)
    response = admin_client.post(
        "/admin/django_rl/livecounter/reset/",
        {"rows": ["drf.anon:throttle_anon_192.0.2.1"], "confirmed": "yes"},
        follow=True,
    )
    assert [str(m) for m in response.context["messages"]] == ["Reset 1 counter: 1 key deleted."]
    assert statuses(views.AnonView, 4) == [200, 200, 200, 429]


def test_manage_py_ratelimit_resets_a_drf_client(capsys):
    assert statuses(views.AnonView, 4) == [200, 200, 200, 429]
    call_command("ratelimit", "reset", "drf.anon", "throttle_anon_192.0.2.1")
    assert "1 key" in capsys.readouterr().out
    assert statuses(views.AnonView, 4) == [200, 200, 200, 429]


def test_the_drop_in_imports_as_drfs_default_throttle_classes():
    """DRF's APIView imports DEFAULT_THROTTLE_CLASSES when it is defined: no import cycle."""
    code = (
        "import django; django.setup()\n"
        "from rest_framework.views import APIView\n"
        "print([c.__module__ + '.' + c.__name__ for c in APIView.throttle_classes])\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.sites.settings_contrib_drf"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "['django_rl.contrib.drf.AnonRateThrottle',",
        "'django_rl.contrib.drf.UserRateThrottle',",
        "'django_rl.contrib.drf.ScopedRateThrottle']",
    ]


@pytest.mark.urls("tests.sites.urls_contrib_drf")
def test_the_urlconfs_drf_throttles_are_listed_before_any_request():
    drf_policies._policies.clear()
    drf_policies._VIEW_RATES.forget()
    names = [name for name in policy_names() if name.startswith("drf")]
    # DoubleView's 3/sec and 6/min, the scoped views' x and y (free: rate None;
    # unscoped: no scope), the tenant throttle.
    assert names == ["drf.minutes", "drf.seconds", "drf.tenant", "drf.x", "drf.y"]
    rates = {(p.name, p.rate) for p in drf_policies.known_policies()}
    assert rates == {
        ("drf.minutes", "6/m"),
        ("drf.seconds", "3/s"),
        ("drf.tenant", "2/m"),
        ("drf.x", "3/m"),
        ("drf.y", "1/m"),
    }


def test_manage_py_check_reports_a_rate_the_drop_in_cannot_parse(settings):
    from django_rl.contrib.drf_checks import check_drf_rates

    settings.REST_FRAMEWORK = {
        "DEFAULT_THROTTLE_CLASSES": ["django_rl.contrib.drf.AnonRateThrottle"],
        "DEFAULT_THROTTLE_RATES": {"anon": "5/mango", "user": "10/min", "off": None},
    }
    [error] = check_drf_rates()
    assert error.id == "django_rl.E090"
    assert error.msg.startswith("REST_FRAMEWORK['DEFAULT_THROTTLE_RATES']['anon']: rate '5/mango'")
    # DRF's own throttles read their rates their way: not ours to judge.
    settings.REST_FRAMEWORK = {
        "DEFAULT_THROTTLE_CLASSES": ["rest_framework.throttling.AnonRateThrottle"],
        "DEFAULT_THROTTLE_RATES": {"anon": "5/mango"},
    }
    assert check_drf_rates() == []
