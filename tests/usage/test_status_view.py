"""``django_rl.views.rate_limit_status``: the standing as JSON, under WSGI and ASGI."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import jsonschema
import pytest
from django.core.checks import run_checks
from django.core.handlers.asgi import ASGIHandler
from django.test import Client

from django_rl import get_policy
from tests.support.asgi import asgi_messages, body_of

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "docs/schemas/rate_limit_status.schema.json").read_text()
)
POLICIES = {
    "fw": {"algorithm": "fixed_window", "rate": "10/h", "key": "ip"},
    "log": {"algorithm": "sliding_log", "rate": "5/m", "key": "ip"},
    "bucket": {"algorithm": "token_bucket", "capacity": 4, "rate": "4/m", "key": "ip"},
    "gcra": {"algorithm": "gcra", "burst": 3, "rate": "3/m", "key": "ip"},
    "window": {"algorithm": "sliding_window", "rate": "20/h", "key": "ip"},
    "users": {"algorithm": "fixed_window", "rate": "10/h", "key": "user"},
}
ADDRESS = "198.51.100.7"
URLS = ["/rate_limit/", "/rate_limit/async/"]


@pytest.fixture
def limits(settings):
    settings.DJANGO_RL = {"POLICIES": POLICIES, "HISTORY": False}
    settings.ROOT_URLCONF = "tests.sites.urls_status"


def validated(body: bytes) -> dict:
    data = json.loads(body)
    jsonschema.validate(data, SCHEMA)
    return data


@pytest.mark.parametrize("url", URLS)
def test_wsgi_every_policy_that_applies(limits, url):
    for _ in range(3):
        get_policy("fw").hit(f"ip:{ADDRESS}")
    get_policy("log").hit(f"ip:{ADDRESS}")
    before = time.time()
    response = Client(REMOTE_ADDR=ADDRESS).get(url)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response["Cache-Control"] == "no-store"
    data = validated(response.content)
    # "users": no user on an anonymous request, left out.
    assert list(data["policies"]) == ["fw", "log", "bucket", "gcra", "window"]
    fw = data["policies"]["fw"]
    assert (fw["limit"], fw["remaining"], fw["window"]) == (10, 7, 3600)
    assert before < fw["reset"] <= before + 3600 + 1
    log = data["policies"]["log"]
    assert (log["limit"], log["remaining"], log["window"]) == (5, 4, 60)
    assert before + 59 <= log["reset"] <= time.time() + 61
    # Untouched: back to full now.
    bucket = data["policies"]["bucket"]
    assert bucket["remaining"] == bucket["limit"] == 4
    assert before - 1 <= bucket["reset"] <= time.time() + 1


@pytest.mark.parametrize("url", URLS)
def test_never_counted(limits, url):
    client = Client(REMOTE_ADDR=ADDRESS)
    for _ in range(5):
        data = validated(client.get(url).content)
    assert all(p["remaining"] == p["limit"] for p in data["policies"].values())
    assert get_policy("fw").peek(f"ip:{ADDRESS}").remaining == 10


def test_a_site_rule_that_matches_does_not_count_it(settings, limits):
    settings.DJANGO_RL = {
        **settings.DJANGO_RL,
        "RULES": [{"path": "^/", "policies": ["fw"]}],
    }
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "django_rl.middleware.RateLimitMiddleware"]
    client = Client(REMOTE_ADDR=ADDRESS)
    assert client.get("/limited/").status_code == 200
    for _ in range(3):
        data = validated(client.get("/rate_limit/").content)
    # The rule and the view's own policy counted /limited/ once (together): 9 left.
    assert data["policies"]["fw"]["remaining"] == 9


@pytest.mark.parametrize("url", URLS)
def test_asgi(limits, url):
    get_policy("gcra").hit(f"ip:{ADDRESS}")

    async def run():
        return await asgi_messages(ASGIHandler(), url, ADDRESS)

    sent = asyncio.run(run())
    assert sent[0]["status"] == 200
    headers = dict(sent[0]["headers"])
    assert headers[b"Content-Type"] == b"application/json"
    assert headers[b"Cache-Control"] == b"no-store"
    data = validated(body_of(sent))
    assert data["policies"]["gcra"]["remaining"] == 2
    assert "users" not in data["policies"]


def test_a_logged_in_user_sees_the_user_policy(limits, django_user_model):
    user = django_user_model.objects.create_user("ada", password="pw")
    client = Client(REMOTE_ADDR=ADDRESS)
    client.force_login(user)
    get_policy("users").hit(f"user:{user.pk}")
    data = validated(client.get("/rate_limit/").content)
    assert data["policies"]["users"]["remaining"] == 9


def test_status_policies_chooses_and_orders(settings, limits):
    settings.DJANGO_RL = {**settings.DJANGO_RL, "STATUS_POLICIES": ["window", "fw", "users"]}
    data = validated(Client(REMOTE_ADDR=ADDRESS).get("/rate_limit/").content)
    assert list(data["policies"]) == ["window", "fw"]


def test_unknown_status_policy_is_a_check_error_and_never_a_500(settings, limits):
    settings.DJANGO_RL = {**settings.DJANGO_RL, "STATUS_POLICIES": ["fw", "nope"]}
    errors = [m for m in run_checks() if m.id == "django_rl.E120"]
    assert len(errors) == 1
    assert "STATUS_POLICIES'][1]" in errors[0].msg and "'nope'" in errors[0].msg
    assert errors[0].hint
    response = Client(REMOTE_ADDR=ADDRESS).get("/rate_limit/")
    assert response.status_code == 200
    assert list(validated(response.content)["policies"]) == ["fw"]


def test_status_policies_not_a_list_is_a_check_error(settings, limits):
    settings.DJANGO_RL = {**settings.DJANGO_RL, "STATUS_POLICIES": "fw"}
    assert [m.id for m in run_checks() if m.id == "django_rl.E120"] == ["django_rl.E120"]
    assert Client(REMOTE_ADDR=ADDRESS).get("/rate_limit/").status_code == 200


def test_a_broken_key_function_leaves_its_policy_out(settings, limits):
    def broken(request):
        raise RuntimeError("boom")

    settings.DJANGO_RL = {
        "POLICIES": {
            **POLICIES,
            "broken": {"algorithm": "gcra", "burst": 1, "rate": "1/m", "key": broken},
        },
        "HISTORY": False,
    }
    for url in URLS:
        response = Client(REMOTE_ADDR=ADDRESS).get(url)
        assert response.status_code == 200
        assert "broken" not in validated(response.content)["policies"]


@pytest.mark.parametrize("url", URLS)
def test_redis_down_degraded_values(settings, limits, private_redis, url):
    settings.DJANGO_RL = {
        "POLICIES": {
            **POLICIES,
            "kept": {
                "algorithm": "sliding_log", "rate": "5/m", "key": "ip", "fallback_rate": "2/m",
            },
        },
        "HISTORY": False,
        "FAIL_OPEN": False,
    }  # fmt: skip
    private_redis.stop()
    response = Client(REMOTE_ADDR=ADDRESS).get(url)
    assert response.status_code == 200
    data = validated(response.content)
    # fail closed: nothing remains; the fallback's own count where there is one.
    assert data["policies"]["fw"]["remaining"] == 0
    assert data["policies"]["kept"]["limit"] == 2


def test_post_is_not_allowed(limits):
    assert Client().post("/rate_limit/").status_code == 405


@pytest.mark.parametrize("url", URLS)
def test_head_answers_like_get(limits, url):
    response = Client(REMOTE_ADDR=ADDRESS).head(url)
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    assert get_policy("fw").peek(f"ip:{ADDRESS}").remaining == 10
