"""An operator's block (an override set in the admin) is enforced in every mode, shadow included."""

from __future__ import annotations

import datetime

import pytest
from django.test import Client
from django.utils import timezone

from django_rl import get_policy, hit_many
from django_rl.models import Override
from django_rl.overrides import LOADER
from tests.conftest import start_of_fresh_window

pytestmark = pytest.mark.django_db

PER_MINUTE = {"algorithm": "fixed_window", "rate": "3/h", "key": "ip"}


@pytest.fixture(autouse=True)
def _fresh_window(redis_client):
    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=60_000)


def block(identity):
    Override.objects.create(
        policy="per_minute",
        identity=identity,
        action="block",
        expires_at=timezone.now() + datetime.timedelta(seconds=600),
    )
    assert LOADER.load()


@pytest.mark.parametrize(
    "settings_",
    [
        {"POLICIES": {"per_minute": {**PER_MINUTE, "mode": "shadow"}}},
        {"POLICIES": {"per_minute": PER_MINUTE}, "SHADOW": True},
    ],
    ids=["policy in shadow mode", "SHADOW"],
)
def test_a_block_is_enforced_in_shadow_mode(settings, settings_):
    settings.DJANGO_RL = settings_
    block("ip:10.0.0.1")
    blocked = Client(REMOTE_ADDR="10.0.0.1").get("/limited/")
    assert blocked.status_code == 429
    assert 590 <= int(blocked["Retry-After"]) <= 600
    # The policy's own denials stay shadow denials: the request goes on.
    other = Client(REMOTE_ADDR="10.0.0.2")
    assert [other.get("/limited/").status_code for _ in range(5)] == [200] * 5
    policy = get_policy("per_minute")
    for decision in (policy.hit("ip:10.0.0.1"), policy.peek("ip:10.0.0.1")):
        assert (decision.allowed, decision.shadow, decision.denies) == (False, False, True)
    assert policy.hit("ip:10.0.0.2").shadow is True


def test_a_block_of_an_address_is_enforced_on_the_drf_drop_in_under_shadow(settings):
    from rest_framework.test import APIRequestFactory

    from tests.sites import views_contrib_drf

    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "3/min"}}
    settings.DJANGO_RL = {"SHADOW": True}
    view = views_contrib_drf.AnonView.as_view()
    factory = APIRequestFactory()
    assert view(factory.get("/", REMOTE_ADDR="10.0.0.1")).status_code == 200
    Override.objects.create(
        policy="drf.anon",
        identity="ip:10.0.0.1",
        action="block",
        expires_at=timezone.now() + datetime.timedelta(seconds=600),
    )
    assert LOADER.load()
    assert view(factory.get("/", REMOTE_ADDR="10.0.0.1")).status_code == 429
    # The Decision says it is enforced (metrics, headers, request.limited read that).
    throttle = views_contrib_drf.AnonRateThrottle()
    request = views_contrib_drf.AnonView().initialize_request(
        factory.get("/", REMOTE_ADDR="10.0.0.1")
    )
    assert throttle.allow_request(request, None) is False
    assert (throttle.decision.shadow, throttle.decision.denies) == (False, True)


def test_a_block_of_a_shadow_policy_stops_the_requests_other_policies_counting(settings):
    # All or nothing: the block denies the request, so no other policy counts it.
    settings.DJANGO_RL = {
        "POLICIES": {
            "per_minute": {**PER_MINUTE, "mode": "shadow"},
            "enforced": {"algorithm": "sliding_log", "rate": "5/h", "key": "ip"},
        }
    }
    block("ip:10.0.0.1")
    blocked, other = hit_many([("per_minute", "ip:10.0.0.1", 1), ("enforced", "ip:10.0.0.1", 1)])
    assert (blocked.denies, other.allowed, other.remaining) == (True, True, 5)
    assert get_policy("enforced").peek("ip:10.0.0.1").remaining == 5
    # A shadow policy's own denial vetoes nothing: the enforced one counts.
    settings.DJANGO_RL = {
        **settings.DJANGO_RL,
        "POLICIES": {
            **settings.DJANGO_RL["POLICIES"],
            "per_minute": {**PER_MINUTE, "rate": "0/h", "mode": "shadow"},
        },
    }
    shadow, counted = hit_many([("per_minute", "ip:10.0.0.2", 1), ("enforced", "ip:10.0.0.2", 1)])
    assert (shadow.allowed, shadow.shadow, counted.remaining) == (False, True, 4)
