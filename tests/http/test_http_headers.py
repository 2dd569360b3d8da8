"""Rate-limit headers over HTTP: both doors, allowed and denied, one and several
policies, every header mode. Values are parsed with http-sf and checked against
the Decisions recorded on the request."""

from __future__ import annotations

import math
import time

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient, Client

from django_rl.core.recording import REQUEST_ATTRIBUTE
from tests.support.sf_headers import expected_t, policies, ratelimit

POLICIES = {
    "single": {"algorithm": "sliding_log", "rate": "5/m", "key": "ip"},
    "burst": {"algorithm": "token_bucket", "capacity": 3, "rate": "1/m", "key": "ip"},
    "sustained": {"algorithm": "sliding_log", "rate": "10/m", "key": "ip"},
}
IETF = {"RateLimit-Policy", "RateLimit"}
LEGACY = {"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}
MODES = {"ietf": IETF, "legacy": LEGACY, "both": IETF | LEGACY, None: set()}
ALL_HEADERS = IETF | LEGACY

pytestmark = pytest.mark.urls("tests.sites.urls_http")


@pytest.fixture(autouse=True)
def _policies(settings):
    settings.DJANGO_RL = {"POLICIES": POLICIES}


def set_mode(settings, mode):
    settings.DJANGO_RL = {"POLICIES": POLICIES, "HEADERS": mode}


def get_n(url, n):
    """Send n GETs (through the async client for the async view); return the responses."""
    if "async" in url:

        async def requests():
            client = AsyncClient()
            return [await client.get(url) for _ in range(n)]

        return async_to_sync(requests)()
    client = Client()
    return [client.get(url) for _ in range(n)]


def decisions_of(response):
    request = getattr(response, "asgi_request", None) or response.wsgi_request
    return getattr(request, REQUEST_ATTRIBUTE)


def check_against_decisions(response, mode, start):
    """Assert every rate-limit header of ``response`` says what its Decisions say.

    ``start``: the test's clock before the request was sent.
    """
    decisions = decisions_of(response)
    closest = min(decisions, key=lambda d: (d.allowed, -d.retry_after, d.remaining, -d.reset_after))
    present = {name for name in ALL_HEADERS if name in response.headers}
    assert present == MODES[mode]
    if mode in ("ietf", "both"):
        listed = policies(response.headers)
        assert list(listed) == [d.policy for d in decisions]
        for decision in decisions:
            assert listed[decision.policy]["q"] == decision.limit
        assert ratelimit(response.headers) == (
            closest.policy,
            {"r": closest.remaining, "t": expected_t(closest)},
        )
    if mode in ("legacy", "both"):
        assert int(response["X-RateLimit-Limit"]) == closest.limit
        assert int(response["X-RateLimit-Remaining"]) == closest.remaining
        wait = closest.reset_after if closest.allowed else closest.retry_after
        # The Unix time the wait ends, rounded up, as of when the response was made.
        reset = int(response["X-RateLimit-Reset"])
        assert math.ceil(start + wait) <= reset <= math.ceil(time.time() + wait)
    if response.status_code == 429:
        assert int(response["Retry-After"]) == expected_t(closest)
        if mode in ("ietf", "both"):
            assert int(response["Retry-After"]) >= ratelimit(response.headers)[1]["t"]
    return closest


def checked_responses(settings, url, mode, codes):
    """Send len(codes) requests in ``mode``; check codes and headers; return them and
    the decision each one's ``RateLimit`` reports."""
    set_mode(settings, mode)
    start = time.time()
    responses = get_n(url, len(codes))
    assert [r.status_code for r in responses] == codes
    return responses, [check_against_decisions(r, mode, start) for r in responses]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("url", ["/single/", "/single-async/", "/api/single/"])
def test_one_policy_every_mode(settings, url, mode):
    responses, closest = checked_responses(settings, url, mode, [200] * 5 + [429])
    assert [d.remaining for d in closest] == [4, 3, 2, 1, 0, 0]
    if mode in ("ietf", "both"):
        assert policies(responses[0].headers) == {"single": {"q": 5, "w": 60}}
        # A sliding log's state is full again one window after its newest hit.
        assert [ratelimit(r.headers)[1]["t"] for r in responses[:5]] == [60] * 5
        # Denied: t is the wait until the oldest hit leaves the window.
        assert 55 <= ratelimit(responses[5].headers)[1]["t"] <= 60
    if mode in ("legacy", "both"):
        assert [r["X-RateLimit-Remaining"] for r in responses] == ["4", "3", "2", "1", "0", "0"]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("url", ["/several/", "/api/several/", "/api/policies-only/"])
def test_several_policies_all_listed_closest_decides(settings, url, mode):
    responses, closest = checked_responses(settings, url, mode, [200, 200, 200, 429])
    # The bucket of 3 runs out first; the 10/m log still has room.
    assert [(d.policy, d.remaining) for d in closest] == [
        ("burst", 2),
        ("burst", 1),
        ("burst", 0),
        ("burst", 0),
    ]
    # Decided together: the request burst denies is not counted by sustained,
    # whose Decision says it alone would have allowed it.
    assert [
        (d.allowed, d.remaining) for d in decisions_of(responses[-1]) if d.policy == "sustained"
    ] == [(True, 7)]
    if mode in ("ietf", "both"):
        for response in responses:
            assert policies(response.headers) == {
                "burst": {"q": 3, "w": 180},
                "sustained": {"q": 10, "w": 60},
            }
        # 1, 2, 3 tokens missing, refilled at 1 a minute; the denied hit waits ~60 s.
        assert [ratelimit(r.headers)[1]["t"] for r in responses[:3]] == [60, 120, 180]
        assert 58 <= ratelimit(responses[3].headers)[1]["t"] <= 60
        assert responses[3]["Retry-After"] == str(ratelimit(responses[3].headers)[1]["t"])


def test_drf_keeps_its_throttled_body_with_the_headers(settings):
    responses = get_n("/api/single/", 6)
    denied = responses[-1]
    wait = int(denied["Retry-After"])
    assert denied.json() == {
        "detail": f"Request was throttled. Expected available in {wait} second"
        + ("s." if wait != 1 else ".")
    }
    assert ratelimit(denied.headers) == ("single", {"r": 0, "t": wait})


def test_uncounted_methods_get_no_headers(settings):
    from django.http import HttpResponse
    from django.test import RequestFactory

    from django_rl.decorators import ratelimit as limit

    @limit("single", methods=["POST"])
    def view(request):
        return HttpResponse("ok")

    response = view(RequestFactory().get("/"))
    assert not {name for name in ALL_HEADERS if name in response.headers}
    assert ratelimit(view(RequestFactory().post("/")).headers) == ("single", {"r": 4, "t": 60})


def test_a_request_no_policy_applies_to_gets_no_headers(settings):
    settings.DJANGO_RL = {
        "POLICIES": {"single": {"algorithm": "sliding_log", "rate": "5/m", "key": "user"}}
    }
    response = Client().get("/single/")  # anonymous: the 'user' key does not apply
    assert response.status_code == 200
    assert not {name for name in ALL_HEADERS if name in response.headers}
