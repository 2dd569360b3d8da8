"""``DJANGO_RL["RULES"]``: limits by path in the middleware, decided with the view's own."""

from __future__ import annotations

import asyncio
import logging

import django
import pytest
from django.core.checks import Error
from django.test import Client

from django_rl import get_policy
from django_rl.checks.system import check_settings
from django_rl.policies.site_rules import RULES

AUTH = "django.contrib.auth.middleware.AuthenticationMiddleware"
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    AUTH,
    "django_rl.middleware.RateLimitMiddleware",
]
POLICIES = {
    "rule_a": {"algorithm": "fixed_window", "rate": "3/h", "key": "ip"},
    "rule_b": {"algorithm": "sliding_log", "rate": "5/h", "key": "ip"},
    "view_a": {"algorithm": "fixed_window", "rate": "4/h", "key": "ip"},
    "posts": {"algorithm": "fixed_window", "rate": "1/h", "key": "ip"},
}
RULES_SETTING = [
    {"path": r"^/api/", "policies": ["rule_a"]},
    {"path": r"^/api/decorated", "policies": ["rule_b", "view_a"]},
    {"path": r"^/plain/", "methods": ["POST"], "policies": ["posts"]},
]


@pytest.fixture(autouse=True)
def _settings(settings, redis_client):
    settings.MIDDLEWARE = MIDDLEWARE
    settings.ROOT_URLCONF = "tests.site_rules.urls"
    settings.DJANGO_RL = {
        "POLICIES": POLICIES,
        "RULES": RULES_SETTING,
        "HISTORY": False,
        "OVERRIDES": False,
    }


def reads(client) -> int:
    return int(client.info("stats")["total_reads_processed"])


def calls(client) -> dict[str, int]:
    return {
        name.removeprefix("cmdstat_"): int(stats["calls"])
        for name, stats in client.info("commandstats").items()
    }


def remaining(name: str, address: str = "127.0.0.1") -> int:
    return get_policy(name).peek(f"ip:{address}").remaining


def test_two_rules_and_a_decorated_view_one_round_trip_each_policy_counted_once(redis_client):
    web = Client()
    web.get("/api/decorated/")  # connections made, scripts loaded
    redis_client.flushall()
    first, second = reads(redis_client), reads(redis_client)
    base = second - first
    response = web.get("/api/decorated/")
    after = reads(redis_client)
    assert response.status_code == 200
    assert after - second - base == 1  # one round trip (the INFO calls taken out)
    commands = calls(redis_client)
    web.get("/api/decorated/")
    sent = {k: v - commands.get(k, 0) for k, v in calls(redis_client).items()}
    assert sent["evalsha"] == 1  # the three policies in one script
    assert (remaining("rule_a"), remaining("rule_b"), remaining("view_a")) == (1, 3, 2)
    assert "RateLimit" in response


def test_a_rule_denies_with_the_decorators_429(redis_client):
    web = Client()
    statuses = [web.get("/api/plain/").status_code for _ in range(5)]
    assert statuses == [200, 200, 200, 429, 429]
    denied = web.get("/api/plain/")
    assert int(denied["Retry-After"]) >= 1
    assert "RateLimit" in denied


def test_all_or_nothing_with_the_views_own_policy(redis_client):
    web = Client()
    # view_a (4/h) is the view's and rule 2's: counted once a request.
    statuses = [web.get("/api/decorated/").status_code for _ in range(5)]
    assert statuses == [200, 200, 200, 429, 429]  # rule_a's 3/h denies first
    assert (remaining("rule_a"), remaining("rule_b"), remaining("view_a")) == (0, 2, 1)


def test_methods_of_a_rule(redis_client):
    web = Client()
    assert [web.get("/plain/").status_code for _ in range(3)] == [200] * 3
    assert [web.post("/plain/").status_code for _ in range(2)] == [200, 429]


def test_a_drf_view_a_rule_denial_is_the_decorators_429_its_own_is_drfs(redis_client):
    web = Client()
    # rule_a (3/h) and the throttle's view_a (4/h): rule_a denies the 4th, before DRF runs.
    answers = [web.get("/api/drf/") for _ in range(4)]
    assert [r.status_code for r in answers] == [200, 200, 200, 429]
    assert answers[-1]["Content-Type"] != "application/json"
    assert remaining("view_a") == 1
    get_policy("rule_a").reset("ip:127.0.0.1")
    # Now only the view's own throttle policy can deny: DRF's Throttled (JSON), our headers.
    answers = [web.get("/api/drf/") for _ in range(2)]
    assert [r.status_code for r in answers] == [200, 429]
    assert answers[-1]["Content-Type"] == "application/json"
    assert "Retry-After" in answers[-1] and "RateLimit" in answers[-1]
    assert remaining("view_a") == 0


@pytest.mark.parametrize("url", ["/api/class/", "/api/drf-open/", "/api/decorated-async/"])
def test_other_views_under_a_rule(redis_client, url):
    web = Client()
    assert [web.get(url).status_code for _ in range(4)] == [200, 200, 200, 429]


@pytest.mark.parametrize(
    "url",
    [
        "/api/drf-decorated/",
        "/api/api-view/",
        "/api/method-decorated/",
        pytest.param(
            "/api/async-method-decorated/",
            marks=pytest.mark.skipif(
                django.VERSION < (5, 0),
                reason="Django 4.2's method_decorator does not keep an async handler async",
            ),
        ),
    ],
)
def test_a_policy_of_a_rule_and_of_a_later_front_door_is_counted_once(redis_client, url):
    # rule_a (3/h) is the rule's and the view's own; the view's own is decided
    # after the middleware (DRF's authentication, method_decorator): the rule's
    # Decision stands for it, the request is counted once.
    web = Client()
    answers = [web.get(url) for _ in range(4)]
    assert [r.status_code for r in answers] == [200, 200, 200, 429]
    assert remaining("rule_a") == 0
    decided_views = {"/api/drf-decorated/", "/api/api-view/"}
    # view_a (4/h), the DRF views' other policy, counted by the view: 3 allowed requests.
    assert remaining("view_a") == (1 if url in decided_views else 4)
    assert answers[0]["RateLimit"].count("rule_a") == 1  # one Decision of rule_a per request


def test_a_later_front_door_of_a_rule_policy_adds_no_round_trip(redis_client):
    web = Client()
    web.get("/api/method-decorated/")  # connections made, scripts loaded
    first, second = reads(redis_client), reads(redis_client)
    web.get("/api/method-decorated/")
    assert reads(redis_client) - second - (second - first) == 1


def test_block_false_view_under_a_rule(redis_client):
    web = Client()
    bodies = [web.get("/api/not-blocking/").content for _ in range(3)]
    assert bodies == [b"limited=False"] * 3
    assert web.get("/api/not-blocking/").status_code == 429  # the rule blocks


def test_exempt_requests_are_not_limited_by_rules(settings, redis_client):
    settings.DJANGO_RL = {**settings.DJANGO_RL, "EXEMPT": ["127.0.0.0/8"]}
    web = Client()
    before = calls(redis_client)
    responses = [web.get("/api/decorated/") for _ in range(6)]
    assert [r.status_code for r in responses] == [200] * 6
    assert all("RateLimit" not in r for r in responses)
    after = calls(redis_client)
    assert {k: v - before.get(k, 0) for k, v in after.items() if k != "info"} == {
        k: 0 for k in after if k != "info"
    }


def test_a_change_of_rules_is_read_again(settings, redis_client):
    web = Client()
    assert web.get("/health/").status_code == 200
    settings.DJANGO_RL = {
        **settings.DJANGO_RL,
        "RULES": [{"path": r"^/health/", "policies": ["posts"]}],
    }
    assert [web.get("/health/").status_code for _ in range(2)] == [200, 429]
    settings.DJANGO_RL = {**settings.DJANGO_RL, "RULES": []}
    assert [web.get("/health/").status_code for _ in range(2)] == [200, 200]
    assert RULES.on is False


def test_a_broken_rule_is_skipped_and_logged_once(settings, redis_client, caplog):
    settings.DJANGO_RL = {
        **settings.DJANGO_RL,
        "RULES": [
            {"path": "(", "policies": ["rule_a"]},
            {"path": "^/api/", "policies": ["missing"]},
            {"path": "^/api/", "policies": ["posts"]},
        ],
    }
    web = Client()
    with caplog.at_level(logging.ERROR, logger="django_rl"):
        statuses = [web.get("/api/plain/").status_code for _ in range(3)]
    assert statuses == [200, 429, 429]
    lines = [r.getMessage() for r in caplog.records if "RULES" in r.getMessage()]
    assert len(lines) == 2
    assert lines[0].startswith("DJANGO_RL['RULES'][0]")
    assert lines[1].startswith("DJANGO_RL['RULES'][1]")


def test_a_long_hostile_path_is_matched_in_bounded_time(redis_client):
    web = Client()
    response = web.get("/" + "a" * 100_000)
    assert response.status_code == 404


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (
            {"path": "(", "policies": ["rule_a"]},
            "DJANGO_RL['RULES'][0] 'path' '(' does not compile",
        ),
        ({"path": "^/", "policies": ["nope"]}, "DJANGO_RL['RULES'][0] names policy 'nope'"),
        (
            {"path": "^/", "methods": ["FETCH"], "policies": ["rule_a"]},
            "DJANGO_RL['RULES'][0] 'methods' has unknown methods: 'FETCH'",
        ),
        ({"path": "^/", "policies": []}, "DJANGO_RL['RULES'][0] 'policies' is []"),
        ({"path": "^/", "policies": ["rule_a"], "key": "ip"}, "DJANGO_RL['RULES'][0] has unknown"),
        ("^/api/", "DJANGO_RL['RULES'][0] is '^/api/'"),
    ],
)
def test_bad_rules_are_check_errors_with_a_hint(settings, rule, message):
    settings.DJANGO_RL = {**settings.DJANGO_RL, "RULES": [rule]}
    errors = [e for e in check_settings() if e.id == "django_rl.E101"]
    assert len(errors) == 1, errors
    assert isinstance(errors[0], Error)
    assert errors[0].msg.startswith(message), errors[0].msg
    assert "https://" in errors[0].hint


def test_good_rules_are_no_check_error(settings):
    assert [e for e in check_settings() if e.id == "django_rl.E101"] == []


def test_rules_under_asgi(redis_client):
    from django.test import AsyncClient

    async def run() -> list[int]:
        web = AsyncClient()
        return [(await web.get("/api/plain/")).status_code for _ in range(4)]

    assert asyncio.run(run()) == [200, 200, 200, 429]


@pytest.mark.django_db
def test_a_user_key_sees_the_sessions_user(settings, redis_client):
    from django.contrib.auth.models import User

    settings.DJANGO_RL = {
        **settings.DJANGO_RL,
        "POLICIES": {
            **POLICIES,
            "per_user": {"algorithm": "fixed_window", "rate": "2/h", "key": "user"},
        },
        "RULES": [{"path": r"^/api/", "policies": ["per_user"]}],
    }
    user = User.objects.create_user("rules-user", password="x")
    web = Client()
    web.force_login(user)
    assert [web.get("/api/plain/").status_code for _ in range(3)] == [200, 200, 429]
    assert get_policy("per_user").peek(f"user:{user.pk}").remaining == 0
    # Anonymous requests: the user key does not apply.
    assert [Client().get("/api/plain/").status_code for _ in range(3)] == [200] * 3
