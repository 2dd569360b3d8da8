"""The Django Ninja drop-in (``django_rl.contrib.ninja``): Ninja's classes, django_rl's decisions.

Ninja's names, base class, constructor, settings and hooks; a Ninja API
served through Django's test client with ``RateLimitMiddleware``: the
rate-limit headers on its answers, a 429 with Retry-After, async operations
(Ninja calls ``allow_request`` synchronously there too), one throttle shared
by many threads. Ninja's own test module passes against the drop-in:
``test_ninja_own_throttling.py``.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import AsyncClient, Client, RequestFactory, override_settings
from ninja import throttling as original

from django_rl.contrib import DROPINS, dropin_policies
from django_rl.contrib import ninja as dropin
from django_rl.testing import rate_limits_disabled

MIDDLEWARE = ["django_rl.middleware.RateLimitMiddleware"]


@pytest.fixture
def site(settings):
    settings.ROOT_URLCONF = "tests.sites.urls_ninja"
    settings.MIDDLEWARE = MIDDLEWARE
    settings.DJANGO_RL = {}


@pytest.mark.parametrize(
    "name",
    [
        "BaseThrottle",
        "SimpleRateThrottle",
        "AnonRateThrottle",
        "AuthRateThrottle",
        "UserRateThrottle",
    ],
)
def test_the_classes_are_ninjas(name):
    assert issubclass(getattr(dropin, name), original.BaseThrottle)
    assert name in dropin.__all__


def test_the_constructor_sets_the_rate():
    throttle = dropin.AnonRateThrottle("10/m")
    assert (throttle.rate, throttle.num_requests, throttle.duration) == ("10/m", 10, 60)
    assert dropin.UserRateThrottle("500/10min").duration == 600


def test_without_a_rate_the_scopes_rate_of_ninjas_setting():
    assert dropin.AnonRateThrottle().rate == "1000/day"  # Ninja's default
    rates = {"anon": "7/h", "auth": "8/m", "user": None, "custom": "2/s"}
    with override_settings(NINJA_DEFAULT_THROTTLE_RATES=rates):
        assert dropin.AnonRateThrottle().num_requests == 7
        assert dropin.AuthRateThrottle().duration == 60
        assert dropin.UserRateThrottle().rate is None
        custom = type("Custom", (dropin.SimpleRateThrottle,), {"scope": "custom"})
        assert (custom().num_requests, custom().duration) == (2, 1)
        missing = type("Missing", (dropin.SimpleRateThrottle,), {"scope": "missing"})
        with pytest.raises(ImproperlyConfigured, match="'missing' scope"):
            missing()
    assert dropin.AnonRateThrottle().rate == "1000/day"


@pytest.mark.parametrize("rate", ["42", "5/mango", "x/m", "1/0", "-1/s", "5/", "1/400d", 5])
def test_a_bad_rate_is_a_value_error(rate):
    with pytest.raises(ValueError):
        dropin.AnonRateThrottle(rate)


def test_a_rate_of_none_is_not_throttled():
    throttle = dropin.AnonRateThrottle("1/s")
    throttle.rate = None
    request = RequestFactory().get("/")
    assert all(throttle.allow_request(request) for _ in range(3))


def test_through_the_api_headers_and_a_429_with_retry_after(site):
    client = Client(REMOTE_ADDR="192.0.2.10")
    for left in range(49, -1, -1):
        response = client.get("/rl/hello")
        assert response.status_code == 200
        assert response["RateLimit-Policy"] == '"ninja.anon";q=50;w=60'
        assert response["RateLimit"].startswith(f'"ninja.anon";r={left};t=')
    response = client.get("/rl/hello")
    assert response.status_code == 429
    assert response.json() == {"detail": "Too many requests."}
    retry_after = int(response["Retry-After"])
    assert 0 < retry_after <= 60
    assert response["RateLimit"] == f'"ninja.anon";r=0;t={retry_after}'
    # Another address counts apart.
    assert Client(REMOTE_ADDR="192.0.2.11").get("/rl/hello").status_code == 200


def test_an_async_operation_is_decided_the_same(site):
    async def main():
        client = AsyncClient(REMOTE_ADDR="192.0.2.12")
        return [await client.get("/rl/hello-async") for _ in range(51)]

    responses = asyncio.run(main())
    assert [r.status_code for r in responses] == [200] * 50 + [429]
    assert responses[-1]["Retry-After"]
    assert responses[-1]["RateLimit"].startswith('"ninja.anon";r=0;')


def test_two_throttles_the_longest_wait(site):
    client = Client(REMOTE_ADDR="192.0.2.13")
    assert [client.get("/rl/two").status_code for _ in range(4)] == [200, 200, 200, 429]
    denied = client.get("/rl/two")
    assert denied.status_code == 429 and 0 < int(denied["Retry-After"]) <= 60
    assert '"ninja.burst";q=3;w=60' in denied["RateLimit-Policy"]


def test_the_policies_are_listed(site):
    assert DROPINS["ninja"] == "django_rl.contrib.ninja_policies"
    Client(REMOTE_ADDR="192.0.2.14").get("/rl/hello")
    assert "ninja.anon" in {policy.name for policy in dropin_policies()}


def test_rate_limits_disabled_counts_nothing(site, redis_client):
    with rate_limits_disabled():
        assert Client(REMOTE_ADDR="192.0.2.15").get("/rl/hello").status_code == 200
    assert redis_client.keys("*ninja*") == []


def test_one_throttle_shared_by_threads_keeps_each_requests_state():
    """Ninja shares an operation's throttle across threads: wait() answers each its own."""
    throttle = dropin.AnonRateThrottle("20/m")
    factory = RequestFactory()
    barrier = threading.Barrier(8)
    results: list[tuple[bool, float | None]] = []
    lock = threading.Lock()

    def worker() -> None:
        barrier.wait()
        for _ in range(10):
            request = factory.get("/", REMOTE_ADDR="192.0.2.16")
            request.auth = None
            allowed = throttle.allow_request(request)
            wait = None if allowed else throttle.wait()
            with lock:
                results.append((allowed, wait))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(allowed for allowed, _ in results) == 20
    assert all(wait is not None and wait > 0 for allowed, wait in results if not allowed)


def test_the_operators_tools_name_an_address_as_the_dropin_counts_it():
    from django_rl.inspection.targets import address_identity, dropin_target
    from django_rl.overrides.rules import TargetError

    assert address_identity("ninja.anon", "127.0.0.1") == "throttle_anon_127.0.0.1"
    assert dropin_target("ninja.user", "user:42") == "throttle_user_42"
    with pytest.raises(TargetError, match="never throttles signed-in users"):
        dropin_target("ninja.anon", "user:42")


def test_cache_and_history_are_the_dropins_log():
    """A subclass that reads Ninja's history itself (``self.cache.get(self.key, [])``) sees ours."""
    throttle = dropin.AnonRateThrottle("5/m")
    request = RequestFactory().get("/", REMOTE_ADDR="192.0.2.17")
    request.auth = None
    assert throttle.allow_request(request) and throttle.allow_request(request)
    assert len(throttle.cache.get(throttle.key, [])) == 2
    assert len(throttle.history) == 2
    assert 0 < throttle.wait() <= 60 / 4 + 0.01  # (the log read back on the server clock)
