"""A shadow policy whose key or rate raises never changes a response: logged, left out.

Through both front doors (``@ratelimit``, ``PolicyThrottle`` on a DRF view),
alone and with enforced policies on the same request (which are decided as
usual, all or nothing among themselves), for ``"mode": "shadow"`` and the
site-wide ``SHADOW``; each cause is logged at WARNING on ``django_rl``, once
per policy and cause however many requests meet it.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import pytest
from asgiref.sync import async_to_sync
from django.http import HttpResponse
from django.test import RequestFactory
from rest_framework.response import Response
from rest_framework.test import APIRequestFactory
from rest_framework.views import APIView

from django_rl import get_policy
from django_rl.decorators import ratelimit
from django_rl.policies.shadow import SHADOW_ERRORS
from django_rl.throttling import PolicyThrottle
from tests.conftest import start_of_fresh_window

ADDRESS = "198.51.100.77"


class KeyBroke(Exception):
    """What the broken key callable raises."""


def broken_key(request: Any) -> object:
    if request.headers.get("X-Cause") == "junk":
        return 7  # not a str: a TypeError of the identity's check
    raise KeyBroke("the tenant lookup failed")


def broken_rate(request: Any) -> str:
    raise ZeroDivisionError("division by zero in the plan lookup")


def junk_rate(request: Any) -> object:
    return 42  # not a rate string


POLICIES = {
    "enforced": {"algorithm": "sliding_log", "rate": "2/h", "key": "ip"},
    "also_enforced": {"algorithm": "fixed_window", "rate": "5/h", "key": "ip"},
    "bad_key": {
        "algorithm": "fixed_window",
        "rate": "1/h",
        "key": "tests.policies.test_shadow_errors.broken_key",
        "mode": "shadow",
    },
    "bad_rate": {
        "algorithm": "token_bucket",
        "capacity": 3,
        "rate": "tests.policies.test_shadow_errors.broken_rate",
        "key": "ip",
        "mode": "shadow",
    },
    "junk_rate": {
        "algorithm": "sliding_window",
        "rate": "tests.policies.test_shadow_errors.junk_rate",
        "key": "ip",
        "mode": "shadow",
    },
    # A healthy shadow policy: still decided (and counted) next to a broken one.
    "watching": {"algorithm": "fixed_window", "rate": "1/h", "key": "ip", "mode": "shadow"},
}
BROKEN = ["bad_key", "bad_rate", "junk_rate"]


@pytest.fixture(autouse=True)
def _limits(settings, redis_client):
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=60_000)
    SHADOW_ERRORS.reset()
    yield
    SHADOW_ERRORS.reset()


def ok(request):
    return HttpResponse("ok")


def get(view, n: int) -> list[tuple[Any, Any]]:
    factory = RequestFactory()
    requests = [factory.get("/", REMOTE_ADDR=ADDRESS) for _ in range(n)]
    return [(view(r), r) for r in requests]


def warnings_of(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "django_rl" and r.levelno >= logging.WARNING]


@pytest.mark.parametrize("name", BROKEN)
def test_a_broken_shadow_policy_alone_leaves_every_response_alone(caplog, name):
    with caplog.at_level(logging.WARNING, logger="django_rl"):
        answers = get(ratelimit(name)(ok), 5)
    assert [r.status_code for r, _ in answers] == [200] * 5
    assert [(req.limited, req.django_rl_decisions) for _, req in answers] == [(False, [])] * 5
    assert all("RateLimit" not in r and "RateLimit-Policy" not in r for r, _ in answers)
    # One line for the five requests, naming the policy, with the traceback.
    (line,) = warnings_of(caplog)
    assert line.levelno == logging.WARNING
    assert f"Rate-limit policy {name!r} (shadow mode) raised" in line.getMessage()
    assert "left out of such requests" in line.getMessage()
    assert line.exc_info is not None


@pytest.mark.parametrize("name", BROKEN)
def test_enforced_policies_of_the_same_request_are_decided_as_usual(caplog, name):
    view = ratelimit("enforced", name, "watching", "also_enforced")(ok)
    with caplog.at_level(logging.WARNING, logger="django_rl"):
        answers = get(view, 4)
    assert [r.status_code for r, _ in answers] == [200, 200, 429, 429]
    assert [req.limited for _, req in answers] == [False, False, True, True]
    seen = [
        [(d.policy, d.allowed, d.remaining) for d in req.django_rl_decisions] for _, req in answers
    ]
    assert seen == [
        [("enforced", True, 1), ("watching", True, 0), ("also_enforced", True, 4)],
        [("enforced", True, 0), ("watching", False, 0), ("also_enforced", True, 3)],
        [("enforced", False, 0), ("watching", False, 0), ("also_enforced", True, 3)],
        [("enforced", False, 0), ("watching", False, 0), ("also_enforced", True, 3)],
    ]
    assert answers[2][0]["Retry-After"]  # the enforced policy's 429, as without the broken one
    # All or nothing among the others: the denied requests counted nowhere.
    identity = f"ip:{ADDRESS}"
    assert get_policy("also_enforced").peek(identity).remaining == 3
    assert len(warnings_of(caplog)) == 1


class BrokenShadowAlone(APIView):
    throttle_classes: ClassVar[list[type]] = [PolicyThrottle]
    throttle_scope = "bad_key"

    def get(self, request):
        return Response({"ok": True})


class BrokenShadowAmongOthers(APIView):
    throttle_classes: ClassVar[list[type]] = [PolicyThrottle]
    throttle_policies: ClassVar[list[str]] = ["enforced", "bad_rate", "junk_rate", "watching"]

    def get(self, request):
        return Response({"ok": True})


def test_policy_throttle_leaves_a_broken_shadow_policy_out(caplog):
    factory = APIRequestFactory()
    alone = BrokenShadowAlone.as_view()
    among = BrokenShadowAmongOthers.as_view()
    with caplog.at_level(logging.WARNING, logger="django_rl"):
        codes = [alone(factory.get("/", REMOTE_ADDR=ADDRESS)).status_code for _ in range(3)]
        responses = [among(factory.get("/", REMOTE_ADDR=ADDRESS)) for _ in range(3)]
    assert codes == [200] * 3
    assert [r.status_code for r in responses] == [200, 200, 429]
    assert responses[2]["Retry-After"]
    # One line per policy and cause: bad_key, bad_rate and junk_rate.
    lines = [r.getMessage() for r in warnings_of(caplog)]
    assert len(lines) == 3
    assert [name for name in BROKEN if any(f"policy {name!r}" in line for line in lines)] == BROKEN


def test_the_shadow_setting_leaves_a_broken_policy_out(settings, caplog):
    broken = {**POLICIES["bad_key"]}
    del broken["mode"]  # shadow by the site-wide setting alone
    settings.DJANGO_RL = {"POLICIES": {**POLICIES, "bad_key": broken}, "SHADOW": True}
    with caplog.at_level(logging.WARNING, logger="django_rl"):
        alone = get(ratelimit("bad_key")(ok), 3)
        among = get(ratelimit("enforced", "bad_key")(ok), 4)
    assert [r.status_code for r, _ in alone + among] == [200] * 7
    # Every policy is in shadow: "enforced" only reports its would-be denials.
    assert [[(d.policy, d.allowed, d.shadow) for d in r.django_rl_decisions] for _, r in among] == [
        [("enforced", True, True)],
        [("enforced", True, True)],
        [("enforced", False, True)],
        [("enforced", False, True)],
    ]
    assert len(warnings_of(caplog)) == 1


def test_an_async_view_leaves_a_broken_shadow_policy_out(caplog):
    @ratelimit("enforced", "bad_key")
    async def view(request):
        return HttpResponse("ok")

    factory = RequestFactory()
    with caplog.at_level(logging.WARNING, logger="django_rl"):
        codes = [
            async_to_sync(view)(factory.get("/", REMOTE_ADDR=ADDRESS)).status_code for _ in range(3)
        ]
    assert codes == [200, 200, 429]
    assert len(warnings_of(caplog)) == 1


def test_each_cause_is_logged_and_a_busy_view_once_per_interval(caplog):
    view = ratelimit("bad_key")(ok)
    factory = RequestFactory()
    junk = [factory.get("/", REMOTE_ADDR=ADDRESS, HTTP_X_CAUSE="junk") for _ in range(30)]
    with caplog.at_level(logging.WARNING, logger="django_rl"):
        get(view, 50)
        # Another cause of the same policy: a line of its own.
        assert {view(r).status_code for r in junk} == {200}
        SHADOW_ERRORS.interval = 0.0  # the interval over: the next error logs again
        get(view, 1)
    lines = [r.getMessage() for r in warnings_of(caplog)]
    assert len(lines) == 3
    assert "raised tests.policies.test_shadow_errors.KeyBroke" in lines[0]
    assert "the tenant lookup failed" in lines[0]
    assert "1 such error(s) since this was last logged" in lines[0]
    assert "raised builtins.TypeError" in lines[1]
    assert "returned int; it must return a str" in lines[1]
    # The third line stands for the 49 errors not logged, and itself.
    assert "raised tests.policies.test_shadow_errors.KeyBroke" in lines[2]
    assert "50 such error(s) since this was last logged" in lines[2]
