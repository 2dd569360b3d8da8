"""``DJANGO_RL["EXEMPT"]``: no front door limits an exempt request, and none asks Redis."""

from __future__ import annotations

import asyncio
import logging
from typing import ClassVar

import pytest
from django.core.checks import Error
from django.http import HttpResponse
from django.test import RequestFactory
from rest_framework.response import Response
from rest_framework.test import APIRequestFactory
from rest_framework.views import APIView

from django_rl import get_policy
from django_rl.checks.system import check_settings
from django_rl.contrib.drf import AnonRateThrottle
from django_rl.contrib.ratelimit.decorators import ratelimit as original_ratelimit
from django_rl.decorators import ratelimit
from django_rl.exceptions import ConfigurationError
from django_rl.policies.exempt import EXEMPTIONS
from django_rl.throttling import PolicyThrottle
from tests.site_rules import exempt_functions

POLICIES = {
    "two": {"algorithm": "fixed_window", "rate": "2/h", "key": "ip"},
    "also": {"algorithm": "sliding_log", "rate": "2/h", "key": "ip"},
}
NETWORKS = ["10.0.0.0/8", "2001:db8::/32", "192.0.2.7"]


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.DJANGO_RL = {
        "POLICIES": POLICIES,
        "EXEMPT": NETWORKS,
        "HISTORY": False,
        "OVERRIDES": False,
    }
    exempt_functions.CALLS.clear()


def commands(client) -> int:
    """Return the commands the server ran but ``INFO`` (scripts' own included)."""
    return sum(
        int(stats["calls"])
        for name, stats in client.info("commandstats").items()
        if name != "cmdstat_info"
    )


def ok(request):
    return HttpResponse("ok")


def statuses(view, n, **meta):
    factory = RequestFactory()
    requests = [factory.get("/", **meta) for _ in range(n)]
    return [(view(r), r) for r in requests]


@pytest.mark.parametrize(
    "address", ["10.1.2.3", "192.0.2.7", "2001:db8::5", "::ffff:10.9.9.9", "[2001:db8::1]:443"]
)
def test_an_exempt_address_is_never_limited_and_sends_no_command(redis_client, address):
    view = ratelimit("two", "also")(ok)
    before = commands(redis_client)
    answers = statuses(view, 5, REMOTE_ADDR=address)
    assert commands(redis_client) - before == 0
    assert [r.status_code for r, _ in answers] == [200] * 5
    assert all("RateLimit" not in r and "RateLimit-Policy" not in r for r, _ in answers)
    assert all(req.django_rl_decisions == [] and req.limited is False for _, req in answers)
    assert redis_client.dbsize() == 0


@pytest.mark.parametrize("address", ["10.1.2.3", "192.0.2.8", "2001:db9::5", "not an address"])
def test_an_address_outside_is_limited(redis_client, address):
    view = ratelimit("two")(ok)
    answers = statuses(view, 3, REMOTE_ADDR=address)
    expected = [200, 200, 429] if address != "10.1.2.3" else [200] * 3
    assert [r.status_code for r, _ in answers] == expected


def test_a_proxy_inside_an_exempt_network_does_not_exempt_its_clients(settings, redis_client):
    settings.DJANGO_RL = {**settings.DJANGO_RL, "NUM_PROXIES": 1}
    view = ratelimit("two")(ok)
    outside = statuses(view, 3, REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.9")
    assert [r.status_code for r, _ in outside] == [200, 200, 429]
    inside = statuses(view, 3, REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="10.4.4.4")
    assert [r.status_code for r, _ in inside] == [200] * 3
    # A client cannot exempt itself by writing the header when no proxy is trusted.
    settings.DJANGO_RL = {**settings.DJANGO_RL, "NUM_PROXIES": 0}
    spoofed = statuses(view, 3, REMOTE_ADDR="203.0.113.10", HTTP_X_FORWARDED_FOR="10.4.4.4")
    assert [r.status_code for r, _ in spoofed] == [200, 200, 429]


def test_the_ip_meta_key_gives_the_address(settings, redis_client):
    settings.DJANGO_RL = {**settings.DJANGO_RL, "IP_META_KEY": "HTTP_CF_CONNECTING_IP"}
    view = ratelimit("two")(ok)
    inside = statuses(view, 3, REMOTE_ADDR="203.0.113.1", HTTP_CF_CONNECTING_IP="10.7.7.7")
    assert [r.status_code for r, _ in inside] == [200] * 3
    outside = statuses(view, 3, REMOTE_ADDR="10.0.0.1", HTTP_CF_CONNECTING_IP="203.0.113.2")
    assert [r.status_code for r, _ in outside] == [200, 200, 429]


def test_a_network_narrower_than_the_prefix_matches_whole_addresses(settings, redis_client):
    settings.DJANGO_RL = {**settings.DJANGO_RL, "IPV4_PREFIX": 24, "EXEMPT": ["198.51.100.7/32"]}
    view = ratelimit("two")(ok)
    assert [r.status_code for r, _ in statuses(view, 3, REMOTE_ADDR="198.51.100.7")] == [200] * 3
    others = statuses(view, 3, REMOTE_ADDR="198.51.100.8")
    assert [r.status_code for r, _ in others] == [200, 200, 429]


def test_a_function_decides_once_per_request(settings, redis_client):
    settings.DJANGO_RL = {
        **settings.DJANGO_RL,
        "EXEMPT": "tests.site_rules.exempt_functions.health_checks",
    }
    view = ratelimit("two")(ratelimit("also")(ok))
    factory = RequestFactory()
    before = commands(redis_client)
    for _ in range(4):
        assert view(factory.get("/health/db", REMOTE_ADDR="203.0.113.5")).status_code == 200
    assert commands(redis_client) - before == 0
    assert exempt_functions.CALLS == ["/health/db"] * 4  # two decorators, one call each request
    limited = [view(factory.get("/api", REMOTE_ADDR="203.0.113.5")).status_code for _ in range(3)]
    assert limited == [200, 200, 429]


@pytest.mark.parametrize("function", ["raises", "not_a_bool"])
def test_a_broken_function_exempts_nothing_and_never_fails_a_request(
    settings, redis_client, caplog, function
):
    settings.DJANGO_RL = {
        **settings.DJANGO_RL,
        "EXEMPT": f"tests.site_rules.exempt_functions.{function}",
    }
    view = ratelimit("two")(ok)
    with caplog.at_level(logging.ERROR, logger="django_rl"):
        answers = statuses(view, 3, REMOTE_ADDR="10.1.1.1")
    assert [r.status_code for r, _ in answers] == [200, 200, 429]
    lines = [r for r in caplog.records if "EXEMPT" in r.getMessage()]
    assert len(lines) == 1


def test_policy_throttle_and_the_drop_ins_skip_exempt_requests(settings, redis_client):
    class Throttled(APIView):
        throttle_classes: ClassVar[list[type]] = [PolicyThrottle]
        throttle_policies: ClassVar[list[str]] = ["two"]

        def get(self, request):
            return Response({"ok": True})

    class Anon(AnonRateThrottle):
        rate = "2/h"

    class DropIn(APIView):
        throttle_classes: ClassVar[list[type]] = [Anon]

        def get(self, request):
            return Response({"ok": True})

    @original_ratelimit(key="ip", rate="2/h", block=True)
    def original(request):
        return HttpResponse("ok")

    factory = APIRequestFactory()
    before = commands(redis_client)
    for view in (Throttled.as_view(), DropIn.as_view(), original):
        for _ in range(4):
            response = view(factory.get("/", REMOTE_ADDR="10.2.2.2"))
            assert response.status_code == 200
            assert "RateLimit" not in response and "Retry-After" not in response
    assert commands(redis_client) - before == 0
    outside = [Throttled.as_view()(factory.get("/", REMOTE_ADDR="203.0.113.3")) for _ in range(3)]
    assert [r.status_code for r in outside] == [200, 200, 429]
    dropped = [DropIn.as_view()(factory.get("/", REMOTE_ADDR="203.0.113.3")) for _ in range(3)]
    assert [r.status_code for r in dropped] == [200, 200, 429]


def test_programmatic_hits_are_not_exempt(redis_client):
    # EXEMPT is about requests: Policy.hit counts whatever identity it is given.
    policy = get_policy("two")
    assert [policy.hit("ip:10.1.1.1").allowed for _ in range(3)] == [True, True, False]


def test_a_change_of_the_setting_is_read_again(settings, redis_client):
    view = ratelimit("two")(ok)
    assert [r.status_code for r, _ in statuses(view, 3, REMOTE_ADDR="10.3.3.3")] == [200] * 3
    settings.DJANGO_RL = {**settings.DJANGO_RL, "EXEMPT": []}
    assert [r.status_code for r, _ in statuses(view, 3, REMOTE_ADDR="10.3.3.3")] == [200, 200, 429]
    assert EXEMPTIONS.on is False  # read, and empty: the usual path's one test


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["10.0.0.0/33"], "DJANGO_RL['EXEMPT'][0] '10.0.0.0/33' is not an IPv4 or IPv6 network"),
        (
            ["10.0.0.0/8", "example.com"],
            "DJANGO_RL['EXEMPT'][1] 'example.com' is not an IPv4 or IPv6 network",
        ),
        ([8], "DJANGO_RL['EXEMPT'][0] is 8, not a string"),
        (
            "tests.site_rules.exempt_functions.missing",
            "DJANGO_RL['EXEMPT'] 'tests.site_rules.exempt_functions.missing' could not be imported",
        ),
        (42, "DJANGO_RL['EXEMPT'] is 42, not a list of networks or a function"),
    ],
)
def test_bad_entries_are_check_errors_with_a_hint(settings, redis_client, value, message):
    settings.DJANGO_RL = {**settings.DJANGO_RL, "EXEMPT": value}
    errors = [e for e in check_settings() if e.id == "django_rl.E100"]
    assert len(errors) == 1
    assert isinstance(errors[0], Error)
    assert errors[0].msg.startswith(message)
    assert "CIDR" in errors[0].hint and "https://" in errors[0].hint
    # The other settings still work: nothing exempt, never a 500.
    view = ratelimit("two")(ok)
    answers = statuses(view, 3, REMOTE_ADDR="203.0.113.77")
    assert [r.status_code for r, _ in answers] == [200, 200, 429]
    get_policy("two")  # no ConfigurationError


def test_good_values_are_no_check_error(settings):
    for value in (NETWORKS, [], None, "tests.site_rules.exempt_functions.health_checks"):
        settings.DJANGO_RL = {**settings.DJANGO_RL, "EXEMPT": value}
        assert [e for e in check_settings() if e.id == "django_rl.E100"] == []


def test_configuration_error_is_not_raised_for_a_bad_exempt(settings):
    settings.DJANGO_RL = {**settings.DJANGO_RL, "EXEMPT": ["nope"]}
    try:
        get_policy("also")
    except ConfigurationError:  # pragma: no cover
        pytest.fail("a bad EXEMPT stopped a policy")


def test_an_async_view_is_exempt_too(redis_client):
    @ratelimit("two")
    async def view(request):
        return HttpResponse("ok")

    factory = RequestFactory()
    before = commands(redis_client)
    answers = [asyncio.run(view(factory.get("/", REMOTE_ADDR="10.8.8.8"))) for _ in range(3)]
    assert commands(redis_client) - before == 0
    assert [r.status_code for r in answers] == [200] * 3
    outside = [asyncio.run(view(factory.get("/", REMOTE_ADDR="203.0.113.8"))) for _ in range(3)]
    assert [r.status_code for r in outside] == [200, 200, 429]
