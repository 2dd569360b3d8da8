"""``rate_limits_disabled``: no limit and no Redis command while on, at every front door.

Commands are counted by the suite's own redis-server (``INFO commandstats``,
the ``INFO`` calls themselves left out), so nothing the process sends can
hide.
"""

from __future__ import annotations

import asyncio
import threading
import time
import unittest
from typing import Any, ClassVar

import pytest
from django.http import HttpResponse
from rest_framework.response import Response
from rest_framework.test import APIRequestFactory
from rest_framework.views import APIView

from django_rl import get_policy, hit_many
from django_rl.contrib.drf import AnonRateThrottle
from django_rl.contrib.ratelimit.decorators import ratelimit as dropin_ratelimit
from django_rl.core.switches import LIMITS
from django_rl.decorators import ratelimit
from django_rl.observability.history import RECORDER
from django_rl.overrides.loader import Loader
from django_rl.testing import rate_limits_disabled
from django_rl.throttling import PolicyThrottle

POLICIES = {
    "p": {"algorithm": "fixed_window", "rate": "2/m", "key": "ip"},
    "log": {"algorithm": "sliding_log", "rate": "2/m", "key": "ip"},
    "plan": {"algorithm": "sliding_window", "rate": "tests.support.plans.tiny_rate", "key": "ip"},
}
ADDRESS = "192.0.2.7"


@pytest.fixture(autouse=True)
def _policies(settings: Any) -> None:
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "2/m"}}


@ratelimit("p")
def named_view(request: Any) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit("p", "log")
def two_policies_view(request: Any) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit(rate="2/m", key="ip", group="testing-inline")
def inline_view(request: Any) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit("plan")
def plan_view(request: Any) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit("p", block=False)
def annotated_view(request: Any) -> HttpResponse:
    return HttpResponse("limited" if request.limited else "ok")


@ratelimit("p")
async def async_view(request: Any) -> HttpResponse:
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


@dropin_ratelimit(key="ip", rate="2/m", block=False)
def dropin_view(request: Any) -> HttpResponse:
    return HttpResponse("limited" if request.limited else "ok")


def _status(view: Any, request: Any) -> int | str:
    response = view(request)
    if asyncio.iscoroutine(response):
        response = asyncio.run(response)
    if isinstance(response, Response):  # DRF's (not rendered here)
        return int(response.status_code)
    if response.status_code == 200 and response.content in (b"limited", b"ok"):
        return response.content.decode()
    return int(response.status_code)


def commands(client: Any) -> int:
    """Return the commands the server has run, but ``INFO`` (which this counting sends)."""
    stats = client.info("commandstats")
    return sum(int(s["calls"]) for name, s in stats.items() if name != "cmdstat_info")


DOORS = {
    "decorator": (named_view, "ok"),
    "several": (two_policies_view, "ok"),
    "inline": (inline_view, "ok"),
    "per_plan": (plan_view, "ok"),
    "block_false": (annotated_view, "ok"),
    "async": (async_view, "ok"),
    "policy_throttle": (ThrottledView.as_view(), 200),
    "drf_drop_in": (DropinDrfView.as_view(), 200),
    "ratelimit_drop_in": (dropin_view, "ok"),
}


@pytest.mark.parametrize("door", list(DOORS))
def test_no_limit_and_no_redis_command_at_each_front_door(door: str, redis_client: Any) -> None:
    view, passed = DOORS[door]
    factory = APIRequestFactory()
    before = commands(redis_client)
    with rate_limits_disabled():
        requests = [factory.get("/", REMOTE_ADDR=ADDRESS) for _ in range(5)]
        answers = [_status(view, request) for request in requests]
        assert answers == [passed] * 5
        assert [r.limited for r in requests] == [False] * 5
        assert [r.django_rl_decisions for r in requests if hasattr(r, "django_rl_decisions")] in (
            [[]] * 5,
            [],
        )
        assert commands(redis_client) == before
    # Back after it: the limit counts from nothing (the block counted nothing).
    answers = [_status(view, factory.get("/", REMOTE_ADDR=ADDRESS)) for _ in range(3)]
    assert answers[:2] == [passed] * 2
    assert answers[2] != passed
    assert commands(redis_client) > before


def test_programmatic_hits_peeks_and_hit_many_send_nothing(redis_client: Any) -> None:
    policy = get_policy("log")
    before = commands(redis_client)
    with rate_limits_disabled():
        decisions = [policy.hit("ip:" + ADDRESS) for _ in range(4)]
        assert [(d.allowed, d.limit) for d in decisions] == [(True, 0)] * 4
        peeked = policy.peek("ip:" + ADDRESS)
        assert (peeked.allowed, peeked.limit) == (True, 0)
        many = hit_many([("p", "a", 1), ("log", "a", 2)])
        assert [(d.allowed, d.limit, d.policy) for d in many] == [(True, 0, "p"), (True, 0, "log")]
        assert commands(redis_client) == before
    assert [policy.hit("ip:" + ADDRESS).allowed for _ in range(3)] == [True, True, False]


def test_bare_and_called_decorators_and_nesting(redis_client: Any) -> None:
    @rate_limits_disabled
    def bare() -> bool:
        return LIMITS.off

    @rate_limits_disabled()
    def called() -> bool:
        return LIMITS.off

    @rate_limits_disabled
    async def awaited() -> bool:
        return LIMITS.off

    assert (bare(), called(), asyncio.run(awaited()), LIMITS.off) == (True, True, True, False)
    with rate_limits_disabled:  # bare, as a context manager too
        assert LIMITS.off
    assert not LIMITS.off
    with rate_limits_disabled():
        with rate_limits_disabled():
            assert LIMITS.off
        assert LIMITS.off  # the outer block still holds it
    assert not LIMITS.off


def test_restored_when_the_decorated_test_fails() -> None:
    @rate_limits_disabled
    def failing() -> None:
        assert LIMITS.off
        raise AssertionError("the test failed")

    with pytest.raises(AssertionError, match="the test failed"):
        failing()
    assert not LIMITS.off and LIMITS.holders == 0


def test_every_thread_while_on_and_none_after(redis_client: Any) -> None:
    policy = get_policy("p")
    seen: dict[str, list[bool]] = {}

    def hits(label: str) -> None:
        seen[label] = [policy.hit("ip:thread").allowed for _ in range(3)]

    with rate_limits_disabled():
        thread = threading.Thread(target=hits, args=("during",))
        thread.start()
        thread.join()
    assert seen["during"] == [True, True, True]
    assert redis_client.keys("rl:p:*") == []
    thread = threading.Thread(target=hits, args=("after",))
    thread.start()
    thread.join()
    assert seen["after"] == [True, True, False]
    hits("here")
    assert seen["here"] == [False, False, False]


def test_one_object_entered_by_two_threads() -> None:
    off = rate_limits_disabled()
    inside = threading.Barrier(2)
    leave = threading.Event()
    left: list[bool] = []

    def hold() -> None:
        with off:
            inside.wait()
            leave.wait(5)
        left.append(LIMITS.off)

    threads = [threading.Thread(target=hold) for _ in range(2)]
    for thread in threads:
        thread.start()
    time.sleep(0.05)
    assert LIMITS.holders == 2
    leave.set()
    for thread in threads:
        thread.join()
    assert LIMITS.holders == 0 and not LIMITS.off


@rate_limits_disabled
class DisabledTestCase(unittest.TestCase):
    __test__ = False  # run by the test below, which sees it fail

    def test_off_in_the_test(self) -> None:
        assert LIMITS.off

    def test_failing(self) -> None:
        raise AssertionError("fails")


def test_a_decorated_test_case_class_restores_after_each_test_also_failed() -> None:
    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(DisabledTestCase).run(result)
    assert (result.testsRun, len(result.failures), len(result.errors)) == (2, 1, 0)
    assert not LIMITS.off and LIMITS.holders == 0


@rate_limits_disabled
class TestPytestClass:
    def test_off_in_a_pytest_class(self) -> None:
        assert LIMITS.off


@rate_limits_disabled
def test_a_decorated_pytest_function_keeps_its_fixtures(redis_client: Any) -> None:
    assert LIMITS.off
    assert redis_client.ping()


def test_the_plugin_fixture(rate_limits_disabled: None) -> None:
    assert LIMITS.off


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_background_threads_send_nothing_while_on(redis_client: Any) -> None:
    """The overrides' loader (a read a second) and the history writer pause while it is on."""
    loader = Loader()
    RECORDER.autostart = True
    try:
        loader.start()
        RECORDER.start()
        deadline = time.monotonic() + 5
        while loader.loads == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert loader.loads == 1
        RECORDER.count("p", "a", "ip:x")  # pending history: written within a second
        with rate_limits_disabled():
            before = commands(redis_client)
            time.sleep(2.5)
            assert commands(redis_client) == before
        time.sleep(1.5)
        stats = redis_client.info("commandstats")
        assert commands(redis_client) > before  # back: the loader reads, history is written
        assert int(stats["cmdstat_get"]["calls"]) >= 2  # the loader's marker, once a second
    finally:
        RECORDER.autostart = False
        loader.stop_at_exit()
        RECORDER.stop()
        RECORDER.discard()


def test_the_plugin_is_registered_and_has_no_autouse_fixture(pytestconfig: Any) -> None:
    from importlib.metadata import entry_points

    from django_rl.testing import plugin

    (point,) = [e for e in entry_points(group="pytest11") if e.name == "django_rl"]
    assert point.value == "django_rl.testing.plugin"
    assert pytestconfig.pluginmanager.get_plugin("django_rl") is plugin
    markers = [  # (pytest's attribute: 8.4 and later, then before)
        getattr(value, "_fixture_function_marker", None)
        or getattr(value, "_pytestfixturefunction", None)
        for value in vars(plugin).values()
    ]
    fixtures = {m.name or "rate_limits_reset": m.autouse for m in markers if m is not None}
    assert fixtures == {"rate_limits_reset": False, "rate_limits_disabled": False}
    assert not LIMITS.off  # --no-rate-limits not given: nothing turned off
