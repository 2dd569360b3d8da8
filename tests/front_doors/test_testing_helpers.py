"""``override_policy``, ``exhaust``, ``assert_rate_limited`` and ``assert_not_rate_limited``."""

from __future__ import annotations

import threading
import unittest
from typing import Any, ClassVar

import pytest
from django.contrib.auth.models import AnonymousUser
from django.http import HttpResponse
from django.test import RequestFactory
from django.urls import path
from rest_framework.response import Response
from rest_framework.test import APIRequestFactory
from rest_framework.views import APIView

from django_rl import get_policy, register_policy
from django_rl.contrib.drf import AnonRateThrottle
from django_rl.contrib.ratelimit.decorators import ratelimit as dropin_ratelimit
from django_rl.decorators import ratelimit
from django_rl.exceptions import ConfigurationError, UnknownPolicy
from django_rl.policies.registry import unregister_policy
from django_rl.testing import (
    assert_not_rate_limited,
    assert_rate_limited,
    exhaust,
    override_policy,
)
from django_rl.throttling import PolicyThrottle

POLICIES = {
    "p": {"algorithm": "fixed_window", "rate": "5/m", "key": "ip"},
    "log": {"algorithm": "sliding_log", "rate": "4/m", "key": "ip"},
    "bucket": {"algorithm": "token_bucket", "capacity": 4, "rate": "1/m", "key": "ip"},
    "gcra": {"algorithm": "gcra", "rate": "3/m", "burst": 3, "key": "ip"},
    "sliding": {"algorithm": "sliding_window", "rate": "4/m", "key": "ip"},
    "plan": {"algorithm": "fixed_window", "rate": "tests.support.plans.tiny_rate", "key": "ip"},
}
ADDRESS = "192.0.2.9"
ID = f"ip:{ADDRESS}"


@pytest.fixture(autouse=True)
def _policies(settings: Any) -> None:
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "3/m"}}
    settings.ROOT_URLCONF = __name__  # inline groups are found on the URLconf's views


@ratelimit("p")
def named_view(request: Any) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit(rate="3/m", key="ip", group="helpers-inline")
def inline_view(request: Any) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit("plan")
def plan_view(request: Any) -> HttpResponse:
    return HttpResponse("ok")


class ThrottledView(APIView):
    throttle_classes: ClassVar[list[Any]] = [PolicyThrottle]
    throttle_scope = "p"

    def get(self, request: Any) -> Response:
        return Response({"ok": True})


class DropinDrfView(APIView):
    throttle_classes: ClassVar[list[Any]] = [AnonRateThrottle]

    def get(self, request: Any) -> Response:
        return Response({"ok": True})


@dropin_ratelimit(key="ip", rate="2/m")
def dropin_view(request: Any) -> HttpResponse:
    return HttpResponse("ok")


urlpatterns = [path("inline/", inline_view)]


def get(view: Any, address: str = ADDRESS) -> Any:
    request = APIRequestFactory().get("/", REMOTE_ADDR=address)
    request.user = AnonymousUser()
    response = view(request)
    response.wsgi_request = request  # as Django's test client attaches it
    return response


def statuses(view: Any, n: int, address: str = ADDRESS) -> list[int]:
    return [get(view, address).status_code for _ in range(n)]


# -- override_policy ------------------------------------------------------------


def test_override_policy_replaces_the_keys_given_and_keeps_the_others() -> None:
    with override_policy("p", rate="2/m"):
        policy = get_policy("p")
        assert (policy.limit, policy.algorithm.name) == (2, "fixed_window")
        assert statuses(named_view, 3) == [200, 200, 429]
        assert statuses(ThrottledView.as_view(), 1) == [429]  # the same state: both doors
    assert get_policy("p").limit == 5
    assert statuses(named_view, 6) == [200] * 5 + [429]  # its own state, untouched


def test_its_state_starts_fresh_each_time() -> None:
    policy = get_policy("p")
    assert [policy.hit(ID).allowed for _ in range(3)] == [True] * 3
    for _ in range(2):
        with override_policy("p", rate="2/m"):
            assert [get_policy("p").hit(ID).allowed for _ in range(3)] == [True, True, False]
    assert get_policy("p").hit(ID).remaining == 1  # 4 of 5: the policy's own count goes on


def test_restored_when_the_test_fails() -> None:
    @override_policy("p", rate="1/m")
    def failing() -> None:
        assert get_policy("p").limit == 1
        raise AssertionError("failed")

    with pytest.raises(AssertionError, match="failed"):
        failing()
    assert get_policy("p").limit == 5


def test_nested_and_by_other_threads() -> None:
    with override_policy("p", rate="2/m"):
        with override_policy("p", algorithm="sliding_log"):
            policy = get_policy("p")
            assert (policy.limit, policy.algorithm.name) == (5, "sliding_log")  # its own spec's
        assert get_policy("p").limit == 2
        seen: list[int] = []
        thread = threading.Thread(target=lambda: seen.append(get_policy("p").limit))
        thread.start()
        thread.join()
        assert seen == [2]  # the whole process
    assert get_policy("p").limit == 5


def test_inline_and_per_plan_policies() -> None:
    with override_policy("@helpers-inline", rate="1/m"):
        assert statuses(inline_view, 2) == [200, 429]
    assert statuses(inline_view, 4) == [200, 200, 200, 429]
    with override_policy("plan", rate="1/m"):  # a rate function replaced by a rate
        assert statuses(plan_view, 2) == [200, 429]
    assert statuses(plan_view, 3) == [200, 200, 429]  # tiny_rate: 2/h


def test_a_registered_policy() -> None:
    register_policy("registered", {"algorithm": "fixed_window", "rate": "9/m", "key": "ip"})
    try:
        with override_policy("registered", rate="1/m"):
            assert get_policy("registered").limit == 1
        assert get_policy("registered").limit == 9
    finally:
        unregister_policy("registered")


def test_an_unknown_policy_or_a_bad_spec_raises_when_turned_on() -> None:
    with pytest.raises(UnknownPolicy), override_policy("nope", rate="1/m"):
        pass
    with pytest.raises(ConfigurationError, match="rate"), override_policy("p", rate="lots"):
        pass
    assert get_policy("p").limit == 5  # nothing left behind


@override_policy("p", rate="1/m")
class OverriddenTestCase(unittest.TestCase):
    __test__ = False  # run by the test below, which sees one fail

    def test_limit(self) -> None:
        assert get_policy("p").limit == 1

    def test_failing(self) -> None:
        raise AssertionError("fails")


def test_a_decorated_test_case_class() -> None:
    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(OverriddenTestCase).run(result)
    assert (result.testsRun, len(result.failures), len(result.errors)) == (2, 1, 0)
    assert get_policy("p").limit == 5


# -- exhaust --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["p", "log", "bucket", "gcra", "sliding"])
def test_exhaust_uses_the_limit_up_in_a_few_hits(name: str) -> None:
    state = exhaust(name, ID)
    assert not state.allowed and state.remaining == 0 and state.retry_after > 0
    assert get_policy(name).hit(ID).allowed is False
    assert get_policy(name).hit("ip:192.0.2.10").allowed is True  # another identity


def test_exhaust_then_every_front_door_denies() -> None:
    exhaust("p", ID)
    assert statuses(named_view, 1) == [429]
    assert statuses(ThrottledView.as_view(), 1) == [429]
    assert statuses(named_view, 1, "192.0.2.10") == [200]


def test_exhaust_by_request_inline_and_per_plan() -> None:
    request = RequestFactory().get("/", REMOTE_ADDR=ADDRESS)
    assert exhaust("plan", None, request=request).limit == 2  # its rate from the request
    assert statuses(plan_view, 1) == [429]
    exhaust("@helpers-inline", ID)
    assert statuses(inline_view, 1) == [429]
    with pytest.raises(TypeError, match="request="):
        exhaust("plan", ID)  # a per-plan rate needs the request


def test_exhaust_a_policy_object_and_an_overridden_one() -> None:
    with override_policy("p", rate="2/m"):
        assert exhaust(get_policy("p"), ID).limit == 2
        assert statuses(named_view, 1) == [429]
    assert statuses(named_view, 1) == [200]


def test_exhaust_refuses_what_has_no_limit() -> None:
    from django_rl.testing import rate_limits_disabled

    with pytest.raises(RuntimeError, match="rate_limits_disabled"), rate_limits_disabled():
        exhaust("p", ID)
    with override_policy("p", rate=None), pytest.raises(ValueError, match="no limit"):
        exhaust("p", ID)


# -- assertions -----------------------------------------------------------------


def test_assert_rate_limited_on_each_kind_of_response() -> None:
    exhaust("p", ID)
    assert 0 < assert_rate_limited(get(named_view)) <= 60
    assert 0 < assert_rate_limited(get(ThrottledView.as_view())) <= 60
    assert statuses(DropinDrfView.as_view(), 3) == [200, 200, 200]
    assert 0 < assert_rate_limited(get(DropinDrfView.as_view())) <= 60
    assert_not_rate_limited(get(named_view, "192.0.2.10"))


def test_assert_rate_limited_checks_retry_after() -> None:
    response = HttpResponse(status=429, headers={"Retry-After": "30", "RateLimit": "x"})
    assert assert_rate_limited(response, retry_after=30) == 30
    assert assert_rate_limited(response, retry_after=29.2) == 30
    assert assert_rate_limited(response, retry_after=range(25, 31)) == 30
    with pytest.raises(AssertionError) as failed:
        assert_rate_limited(response, retry_after=60)
    assert str(failed.value).startswith("Retry-After is 30, expected 60: status 429 Too Many")
    assert "'RateLimit': 'x'" in str(failed.value)


def test_assert_rate_limited_says_what_the_response_was() -> None:
    with pytest.raises(AssertionError) as failed:
        assert_rate_limited(HttpResponse("ok", headers={"X-Thing": "1"}))
    assert str(failed.value) == (
        "expected a rate-limited response (429 with Retry-After), got status 200 OK, "
        "Retry-After: absent, headers: {'Content-Type': 'text/html; charset=utf-8', "
        "'X-Thing': '1'}"
    )
    with pytest.raises(AssertionError, match="a 429 without Retry-After: status 429"):
        assert_rate_limited(HttpResponse(status=429))


def test_the_django_ratelimit_drop_in_answers_403_and_the_message_says_so() -> None:
    from django.core.exceptions import PermissionDenied

    request = RequestFactory().get("/", REMOTE_ADDR=ADDRESS)
    dropin_view(request)
    dropin_view(request)
    with pytest.raises(PermissionDenied):
        dropin_view(request)
    response = HttpResponse(status=403)
    response.wsgi_request = request  # type: ignore[attr-defined]
    assert request.limited is True
    with pytest.raises(AssertionError, match="django-ratelimit's Ratelimited"):
        assert_rate_limited(response)
    with pytest.raises(AssertionError, match=r"request\.limited is True"):
        assert_not_rate_limited(response)


def test_assert_not_rate_limited_says_what_the_response_was() -> None:
    with pytest.raises(AssertionError) as failed:
        assert_not_rate_limited(HttpResponse(status=429, headers={"Retry-After": "7"}))
    assert str(failed.value).startswith(
        "expected a response not rate limited, got status 429 Too Many Requests, "
        "Retry-After: '7', headers: {'Retry-After': '7'"
    )
    assert_not_rate_limited(HttpResponse("fine"))
