"""An operator's block (an override set in the admin) is enforced in every mode, shadow included."""

from __future__ import annotations

import datetime

import pytest
from django.test import Client
from django.utils import timezone

from django_rl import get_policy
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
