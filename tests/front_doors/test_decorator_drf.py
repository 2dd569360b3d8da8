"""``@ratelimit`` on DRF views sees the user DRF authenticated (HTTP Basic here).

The decision runs once DRF has authenticated the request, wherever the
decorator sits: on an ``APIView`` or ``ViewSet`` class, through ``method_decorator`` on its
``dispatch``, above or below ``@api_view``, or on an ``as_view()`` function. A
denied request gets DRF's own 429 (``Throttled``: ``Retry-After`` and
``detail``), the same answer as ``PolicyThrottle``'s, and every counted
response carries the rate-limit headers.
"""

from __future__ import annotations

import base64

import pytest
from django.test import Client

from tests.support.sf_headers import policies, ratelimit

pytestmark = [pytest.mark.urls("tests.sites.urls_drf"), pytest.mark.django_db]

POLICIES = {
    "per_user": {"algorithm": "sliding_log", "rate": "3/m", "key": "user"},
    "per_user_or_ip": {"algorithm": "sliding_log", "rate": "3/m", "key": "user_or_ip"},
    "per_ip": {"algorithm": "sliding_log", "rate": "3/m", "key": "ip"},
}
PLACES = [
    "/class/",
    "/method-decorated/",
    "/above-api-view/",
    "/below-api-view/",
    "/as-view/",
    "/viewset/",
]


@pytest.fixture(autouse=True)
def _policies(settings):
    settings.DJANGO_RL = {"POLICIES": POLICIES}


@pytest.fixture
def users(django_user_model):
    for name in ("alice", "bob"):
        django_user_model.objects.create_user(name, password=f"{name}-pw")


def basic(name, password=None):
    token = base64.b64encode(f"{name}:{password or name + '-pw'}".encode()).decode()
    return {"HTTP_AUTHORIZATION": f"Basic {token}"}


def send(url, n, method="get", **extra):
    client = Client()
    return [getattr(client, method)(url, **extra) for _ in range(n)]


def assert_drf_429(response, policy):
    """DRF's Throttled answer, as PolicyThrottle gives it, with our headers."""
    assert response.status_code == 429
    wait = int(response["Retry-After"])
    assert 1 <= wait <= 60
    assert response.json() == {
        "detail": f"Request was throttled. Expected available in {wait} second"
        + ("s." if wait != 1 else ".")
    }
    assert ratelimit(response) == (policy, {"r": 0, "t": wait})


@pytest.mark.parametrize("url", PLACES)
def test_a_user_policy_counts_the_drf_user(users, url):
    responses = send(url, 6, **basic("alice"))
    assert [r.status_code for r in responses] == [200] * 3 + [429] * 3
    assert [r.json() for r in responses[:3]] == [{"user": "alice"}] * 3
    assert [ratelimit(r)[1]["r"] for r in responses[:3]] == [2, 1, 0]
    assert policies(responses[0]) == {"per_user": {"q": 3, "w": 60}}
    for denied in responses[3:]:
        assert_drf_429(denied, "per_user")
    # Another user has a bucket of their own.
    assert [r.status_code for r in send(url, 4, **basic("bob"))] == [200] * 3 + [429]
    # The policy does not apply to anonymous requests: not counted, no headers.
    anonymous = send(url, 5)
    assert [(r.status_code, r.json()) for r in anonymous] == [(200, {"user": None})] * 5
    assert "RateLimit" not in anonymous[0]


def test_user_or_ip_gives_each_user_behind_one_address_a_bucket(users):
    alice = send("/user-or-ip/", 4, **basic("alice"))
    bob = send("/user-or-ip/", 4, **basic("bob"))
    anonymous = send("/user-or-ip/", 4)
    for responses in (alice, bob, anonymous):
        assert [r.status_code for r in responses] == [200] * 3 + [429]
    assert ratelimit(alice[0]) == ("per_user_or_ip", {"r": 2, "t": 60})


def test_failed_logins_count_and_the_limit_answers_before_the_401(users):
    # An IP policy on a view that needs a user: wrong passwords are counted
    # (DRF rejects them while authenticating), so guessing is limited.
    wrong = send("/ip/", 4, **basic("alice", "guess"))
    assert [r.status_code for r in wrong] == [401, 401, 401, 429]
    assert ratelimit(wrong[0]) == ("per_ip", {"r": 2, "t": 60})
    assert_drf_429(wrong[3], "per_ip")
    assert_drf_429(send("/ip/", 1, **basic("alice"))[0], "per_ip")


def test_methods_pick_what_counts_on_a_drf_view(users):
    assert [r.status_code for r in send("/posts/", 5, **basic("alice"))] == [200] * 5
    posts = send("/posts/", 4, method="post", **basic("alice"))
    assert [r.status_code for r in posts] == [200] * 3 + [429]


def test_a_decorated_subclass_of_a_decorated_class_counts_each_use_once(users):
    # Two uses of per_user (3/m): a request costs 2, so the second is denied.
    responses = send("/child/", 3, **basic("alice"))
    assert [r.status_code for r in responses] == [200, 429, 429]
    assert ratelimit(responses[0]) == ("per_user", {"r": 1, "t": 60})


def test_decorating_an_as_view_function_leaves_the_class_alone(users):
    assert [r.status_code for r in send("/as-view/", 4, **basic("alice"))] == [200] * 3 + [429]
    plain = send("/plain/", 5, **basic("alice"))
    assert [r.status_code for r in plain] == [200] * 5
    assert "RateLimit" not in plain[0]
