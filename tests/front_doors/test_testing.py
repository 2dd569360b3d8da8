"""``django_rl.testing``: what a project's test suite uses to forget every rate limit."""

from __future__ import annotations

import pytest
from rest_framework.test import APIRequestFactory

from django_rl import get_policy
from django_rl.policies import reset_epoch
from django_rl.testing import rate_limits_reset, reset_rate_limits  # noqa: F401 (a fixture)
from tests.sites import views_contrib_drf as views

POLICIES = {"p": {"algorithm": "sliding_log", "rate": "2/h", "key": "ip"}}
ID = "ip:192.0.2.5"


@pytest.fixture(autouse=True)
def _policies(settings):
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "1/h"}}


def test_reset_rate_limits_forgets_redis_state_and_this_process_denials(redis_client):
    policy = get_policy("p")
    assert [policy.hit(ID).allowed for _ in range(4)] == [True, True, False, False]
    assert policy.key(ID) in policy.denials  # the second denial is remembered
    redis_client.set("other-app:key", "kept")
    token = redis_client.get("rl:~epoch")
    assert reset_rate_limits() == 2  # the log and the old token
    assert policy.key(ID) not in policy.denials
    assert redis_client.get("other-app:key") == b"kept"
    assert redis_client.get("rl:~epoch") not in (None, token)  # other processes see it
    assert 0 < redis_client.pttl("rl:~epoch") <= reset_epoch.TOKEN_TTL_MS
    assert [policy.hit(ID).allowed for _ in range(3)] == [True, True, False]


def test_reset_rate_limits_resets_the_drf_drop_in():
    request = APIRequestFactory().get("/", REMOTE_ADDR="192.0.2.6")
    assert [views.AnonView.as_view()(request).status_code for _ in range(3)] == [200, 429, 429]
    reset_rate_limits()
    assert [views.AnonView.as_view()(request).status_code for _ in range(2)] == [200, 429]


def test_the_fixture_resets_before_the_test(rate_limits_reset, redis_client):  # noqa: F811
    assert [k for k in redis_client.scan_iter("rl:*") if not k.startswith(b"rl:~")] == []
    policy = get_policy("p")
    assert [policy.hit(ID).allowed for _ in range(3)] == [True, True, False]
