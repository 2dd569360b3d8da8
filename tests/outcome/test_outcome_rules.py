"""``count_when`` through ``RULES`` (settled by ``RateLimitMiddleware``), and its round trips.

A request that counts costs its decision's one round trip; one given back
costs one more (``refund.lua``), counted by the server (``INFO stats``).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.http import HttpResponse
from django.test import Client
from django.urls import path

from django_rl import get_policy
from django_rl.decorators import ratelimit

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django_rl.middleware.RateLimitMiddleware",
]


def plain(request: Any, status: int) -> HttpResponse:
    return HttpResponse(status=status)


@ratelimit("own", count_when="success")
def decorated(request: Any, status: int) -> HttpResponse:
    return HttpResponse(status=status)


urlpatterns = [
    path("login/<int:status>/", plain),
    path("both/<int:status>/", decorated),
]


@pytest.fixture(autouse=True)
def _settings(settings: Any) -> None:
    settings.MIDDLEWARE = MIDDLEWARE
    settings.ROOT_URLCONF = __name__
    settings.DJANGO_RL = {
        "POLICIES": {
            "login": {
                "algorithm": "sliding_log", "rate": "3/h", "key": "ip", "count_when": "failure",
            },
            "own": {"algorithm": "gcra", "rate": "3/h", "burst": 3, "key": "ip"},
        },
        "RULES": [{"path": r"^/(login|both)/", "policies": ["login"]}],
        "HISTORY": False,
        "OVERRIDES": False,
    }  # fmt: skip


def used(name: str) -> int:
    decision = get_policy(name).peek("ip:127.0.0.1")
    return decision.limit - decision.remaining


def test_a_rules_count_when_is_settled_by_the_middleware():
    web = Client()
    for _ in range(5):
        assert web.get("/login/200/").status_code == 200
    assert used("login") == 0
    assert [web.get("/login/401/").status_code for _ in range(4)] == [401, 401, 401, 429]
    assert web.get("/login/200/").status_code == 429
    assert used("login") == 3


def test_a_rule_and_the_views_own_count_when_together():
    web = Client()
    assert web.get("/both/200/").status_code == 200  # login gives back, own keeps
    assert (used("login"), used("own")) == (0, 1)
    assert web.get("/both/401/").status_code == 401  # login keeps, own gives back
    assert (used("login"), used("own")) == (1, 1)


def reads(client: Any) -> int:
    return int(client.info("stats")["total_reads_processed"])


@pytest.mark.parametrize(("status", "round_trips"), [(401, 1), (200, 2)])
def test_one_round_trip_to_decide_and_one_to_give_back(redis_client, status, round_trips):
    web = Client()
    web.get("/login/200/")  # connections made, scripts loaded
    first, second = reads(redis_client), reads(redis_client)
    base = second - first
    assert web.get(f"/login/{status}/").status_code == status
    assert reads(redis_client) - second - base == round_trips
