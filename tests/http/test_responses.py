"""429 bodies (text, HTML, RFC 9457 problem+json, a view of your own) and the
RateLimited exception, through the middleware and the DRF exception handler."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient, Client

from django_rl import Decision
from django_rl.exceptions import RateLimited
from django_rl.http.responses import PROBLEM_TYPE, preferred_format
from tests.support.sf_headers import policies, ratelimit

POLICIES = {
    "single": {"algorithm": "sliding_log", "rate": "5/m", "key": "ip"},
    "burst": {"algorithm": "token_bucket", "capacity": 3, "rate": "1/m", "key": "ip"},
    "sustained": {"algorithm": "sliding_log", "rate": "10/m", "key": "ip"},
    "export": {"algorithm": "sliding_log", "rate": "5/m", "key": "ip"},
}
MIDDLEWARE = "django_rl.middleware.RateLimitMiddleware"
BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"

pytestmark = pytest.mark.urls("tests.sites.urls_http")


@pytest.fixture(autouse=True)
def _policies(settings):
    settings.DJANGO_RL = {"POLICIES": POLICIES}


def sixth(url, **headers):
    client = Client(headers=headers)
    responses = [client.get(url) for _ in range(6)]
    assert [r.status_code for r in responses] == [200] * 5 + [429]
    return responses[-1]


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        ("", "text"),
        ("*/*", "text"),
        ("text/plain", "text"),
        ("application/json", "json"),
        ("application/problem+json", "json"),
        ("Application/JSON; charset=utf-8", "json"),
        ("application/json, text/plain, */*", "json"),
        (BROWSER, "html"),
        ("text/html;q=0.5, application/json;q=0.9", "json"),
        ("application/json;q=0.5, text/html", "html"),
        ("text/html, application/json", "html"),  # a tie: the first named wins
        ("application/json;q=0", "text"),
        ("application/json;q=banana", "text"),
        ("application/json;q=7", "text"),
        ("text/csv, image/*", "text"),
        (",,;;==,", "text"),
        # Only the first 32 media ranges are read, whatever the header's length.
        ("text/plain, " * 40 + "application/json", "text"),
    ],
)
def test_preferred_format(accept, expected):
    assert preferred_format(accept) == expected


def test_plain_text_by_default():
    denied = sixth("/single/")
    wait = int(denied["Retry-After"])
    assert denied["Content-Type"] == "text/plain; charset=utf-8"
    assert denied["Vary"] == "Accept"
    assert denied.content.decode() == f"Too many requests. Retry after {wait} seconds.\n"


def test_html_for_browsers():
    denied = sixth("/single/", accept=BROWSER)
    wait = int(denied["Retry-After"])
    assert denied["Content-Type"] == "text/html; charset=utf-8"
    html = denied.content.decode()
    assert html.startswith("<!DOCTYPE html>")
    assert "<title>429 Too Many Requests</title>" in html
    assert f"<p>Too many requests. Retry after {wait} seconds.</p>" in html


def assert_valid_problem(response):
    """RFC 9457 section 3: member types, and status matching the response."""
    assert response["Content-Type"] == "application/problem+json"
    problem = json.loads(response.content)
    assert isinstance(problem["type"], str) and problem["type"].startswith("https://")
    assert isinstance(problem["title"], str) and problem["title"]
    assert type(problem["status"]) is int and problem["status"] == response.status_code
    assert isinstance(problem["detail"], str)
    assert type(problem["retry_after"]) is int
    assert problem["retry_after"] == int(response["Retry-After"])
    assert all(isinstance(name, str) for name in problem["violated-policies"])
    return problem


@pytest.mark.parametrize("accept", ["application/json", "application/problem+json"])
def test_problem_json_for_json_clients(accept):
    denied = sixth("/single/", accept=accept)
    problem = assert_valid_problem(denied)
    wait = int(denied["Retry-After"])
    assert problem == {
        "type": PROBLEM_TYPE,
        "title": "Quota Exceeded",
        "status": 429,
        "detail": f"Too many requests. Retry after {wait} seconds.",
        "retry_after": wait,
        "violated-policies": ["single"],
    }
    assert ratelimit(denied.headers) == ("single", {"r": 0, "t": wait})


def test_problem_json_names_only_the_policies_that_denied():
    client = Client(headers={"accept": "application/json"})
    responses = [client.get("/several/") for _ in range(4)]
    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    assert assert_valid_problem(responses[-1])["violated-policies"] == ["burst"]


def test_a_view_of_your_own_renders_the_429(settings):
    settings.DJANGO_RL = {
        **settings.DJANGO_RL,
        "RATELIMITED_VIEW": "tests.sites.views_http.rate_limited",
    }
    denied = sixth("/single/")
    wait = int(denied["Retry-After"])
    assert denied.json() == {"error": "slow down", "policy": "single", "wait": wait}
    assert ratelimit(denied.headers) == ("single", {"r": 0, "t": wait})
    assert policies(denied.headers) == {"single": {"q": 5, "w": 60}}


def test_a_view_of_your_own_renders_the_429_of_an_async_view(settings):
    settings.DJANGO_RL = {
        **settings.DJANGO_RL,
        "RATELIMITED_VIEW": "tests.sites.views_http.rate_limited",
    }

    async def six():
        client = AsyncClient()
        return [await client.get("/single-async/") for _ in range(6)]

    responses = async_to_sync(six)()
    assert [r.status_code for r in responses] == [200] * 5 + [429]
    assert responses[-1].json()["policy"] == "single"
    assert "Retry-After" in responses[-1]


def test_raising_rate_limited_without_the_middleware_is_a_403():
    client = Client()
    assert [client.get("/raises/").status_code for _ in range(6)] == [200] * 5 + [403]


def test_the_middleware_turns_rate_limited_into_the_same_429(settings):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE]
    raised = sixth("/raises/", accept="application/json")
    decorated = sixth("/single/", accept="application/json")
    assert raised["Content-Type"] == decorated["Content-Type"] == "application/problem+json"
    raised_problem, decorated_problem = (
        assert_valid_problem(raised),
        assert_valid_problem(decorated),
    )
    assert raised_problem == {**decorated_problem, "violated-policies": ["export"]}
    wait = int(raised["Retry-After"])
    assert ratelimit(raised.headers) == ("export", {"r": 0, "t": wait})
    assert policies(raised.headers) == {"export": {"q": 5, "w": 60}}


def test_the_middleware_works_for_async_requests(settings):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE]

    async def requests():
        client = AsyncClient()
        return [await client.get("/raises/") for _ in range(6)], await client.get("/missing/")

    responses, missing = async_to_sync(requests)()
    assert [r.status_code for r in responses] == [200] * 5 + [429]
    assert ratelimit(responses[-1].headers) == ("export", {"r": 0, "t": 60})
    assert missing.status_code == 404
    assert ratelimit(missing.headers) == ("single", {"r": 4, "t": 60})


def test_decisions_recorded_by_hand_get_headers_through_the_middleware(settings):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE]
    response = Client().get("/recorded/")
    assert response.status_code == 200
    assert ratelimit(response.headers) == ("export", {"r": 4, "t": 60})


def test_the_middleware_puts_headers_on_responses_made_of_exceptions(settings):
    # Without it, Django turns the view's Http404 into a response the
    # decorator never sees.
    assert "RateLimit" not in Client().get("/missing/", REMOTE_ADDR="198.51.100.9").headers
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE]
    response = Client().get("/missing/")
    assert response.status_code == 404
    assert policies(response.headers) == {"single": {"q": 5, "w": 60}}
    assert ratelimit(response.headers) == ("single", {"r": 4, "t": 60})


def test_rate_limited_in_a_drf_view_without_the_handler_is_drfs_403():
    client = Client()
    assert [client.get("/api/raises/").status_code for _ in range(6)] == [200] * 5 + [403]


def test_the_drf_handler_answers_rate_limited_as_throttled(settings):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "EXCEPTION_HANDLER": "django_rl.throttling.exception_handler",
    }
    denied = sixth("/api/raises/")
    wait = int(denied["Retry-After"])
    assert denied.json() == {
        "detail": f"Request was throttled. Expected available in {wait} seconds."
    }
    assert ratelimit(denied.headers) == ("export", {"r": 0, "t": wait})


def test_the_drf_handler_leaves_other_errors_to_drf(settings):
    from rest_framework.exceptions import NotFound

    from django_rl.throttling import exception_handler

    response = exception_handler(NotFound(), {"request": None, "view": None})
    assert response is not None and response.status_code == 404


def test_rate_limited_carries_the_decisions():
    allowed = Decision(True, 10, 3, 0.0, 50.0, "daily")
    short = Decision(False, 3, 0, 2.5, 60.0, "burst")
    long = Decision(False, 5, 0, 40.1, 60.0, "login")
    exc = RateLimited([allowed, short, long])
    assert exc.decisions == (allowed, short, long)
    assert exc.denied == (short, long)
    assert exc.decision is long
    assert exc.retry_after == 41
    assert str(exc) == "Rate limited by burst, login: retry after 41 s"
    assert RateLimited(short).decisions == (short,)
    with pytest.raises(ValueError, match="at least one Decision that denied"):
        RateLimited(allowed)
