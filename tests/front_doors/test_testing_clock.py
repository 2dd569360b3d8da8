"""``CLOCK: "app"``: time-machine and freezegun move django_rl's clock, the deny cache's too.

A test walks a window to its end (the denial's own Retry-After) and sees the
limit come back, without waiting; a clock moved back does not keep a
denial remembered at a later time.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import freezegun
import pytest
import time_machine
from django.contrib.auth.models import AnonymousUser
from django.http import HttpResponse
from rest_framework.response import Response
from rest_framework.test import APIRequestFactory
from rest_framework.views import APIView

from django_rl import get_policy
from django_rl.backends.clock import app_ms, app_seconds
from django_rl.contrib.drf import AnonRateThrottle
from django_rl.decorators import ratelimit
from django_rl.policies.deny_cache import get_deny_cache
from django_rl.policies.fallback import get_fallback_store
from django_rl.testing import assert_not_rate_limited, assert_rate_limited, exhaust

POLICIES = {
    "fixed": {"algorithm": "fixed_window", "rate": "3/m", "key": "ip"},
    "log": {"algorithm": "sliding_log", "rate": "3/m", "key": "ip"},
    "bucket": {"algorithm": "token_bucket", "capacity": 3, "rate": "1/m", "key": "ip"},
    "gcra": {"algorithm": "gcra", "rate": "3/m", "burst": 3, "key": "ip"},
    "sliding": {"algorithm": "sliding_window", "rate": "3/m", "key": "ip"},
}
ID = "ip:192.0.2.20"


@pytest.fixture(autouse=True)
def _app_clock(settings: Any) -> None:
    settings.DJANGO_RL = {"CLOCK": "app", "POLICIES": POLICIES}
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "2/m"}}


Mover = Callable[[float], None]


@contextmanager
def time_machine_clock() -> Iterator[Mover]:
    with time_machine.travel(datetime.datetime.now(datetime.timezone.utc), tick=False) as t:
        yield t.shift


@contextmanager
def freezegun_clock() -> Iterator[Mover]:
    with freezegun.freeze_time(datetime.datetime.now(datetime.timezone.utc)) as frozen:
        yield lambda seconds: frozen.tick(datetime.timedelta(seconds=seconds))


CLOCKS = {"time_machine": time_machine_clock, "freezegun": freezegun_clock}


def test_the_deny_cache_and_the_fallback_keep_the_decisions_clock() -> None:
    denials = get_deny_cache()
    assert denials is not None and denials.clock is app_seconds
    assert get_fallback_store().clock is app_ms


@pytest.mark.parametrize("clock", list(CLOCKS))
@pytest.mark.parametrize("name", list(POLICIES))
def test_walk_to_the_end_of_the_wait_and_the_limit_is_back(clock: str, name: str) -> None:
    policy = get_policy(name)
    with CLOCKS[clock]() as move:
        exhaust(name, ID)
        denied = [policy.hit(ID) for _ in range(3)]
        assert [d.allowed for d in denied] == [False] * 3
        assert policy.key(ID) in policy.denials  # remembered: answered without Redis
        wait = denied[-1].retry_after
        assert 0 < wait <= 120  # (sliding_window: up to two windows)
        assert [d.retry_after for d in denied] == [wait] * 3  # the clock stands still
        move(wait - 0.002)
        assert policy.hit(ID).allowed is False  # 2 ms before the end
        move(0.003)
        assert policy.hit(ID).allowed is True  # the end: back, the deny cache too


@pytest.mark.parametrize("clock", list(CLOCKS))
def test_a_clock_moved_back_forgets_denials_remembered_later(clock: str) -> None:
    policy = get_policy("fixed")
    with CLOCKS[clock]() as move:
        exhaust("fixed", ID)
        assert [policy.hit(ID).allowed for _ in range(3)] == [False] * 3
        assert policy.key(ID) in policy.denials
        move(-3600)  # an hour back: another window, whose counter is empty
        assert policy.hit(ID).allowed is True
        assert policy.key(ID) not in policy.denials


@ratelimit("fixed")
def view(request: Any) -> HttpResponse:
    return HttpResponse("ok")


class DropInView(APIView):
    throttle_classes: ClassVar[list[Any]] = [AnonRateThrottle]

    def get(self, request: Any) -> Response:
        return Response({"ok": True})


def get(view: Any) -> Any:
    request = APIRequestFactory().get("/", REMOTE_ADDR="192.0.2.21")
    request.user = AnonymousUser()
    return view(request)


def test_the_worked_example_of_docs_testing() -> None:
    """docs/testing.md's example, as it is there."""
    factory = APIRequestFactory()
    with time_machine.travel("2030-01-01 12:00:00+00:00", tick=False) as traveller:
        for _ in range(3):
            assert_not_rate_limited(view(factory.get("/login/")))
        wait = assert_rate_limited(view(factory.get("/login/")), retry_after=60)
        traveller.shift(wait - 1)
        assert_rate_limited(view(factory.get("/login/")), retry_after=1)
        traveller.shift(1)
        assert_not_rate_limited(view(factory.get("/login/")))


@pytest.mark.parametrize("clock", list(CLOCKS))
def test_a_view_and_the_drf_drop_in(clock: str) -> None:
    with CLOCKS[clock]() as move:
        for answer in [get(view) for _ in range(3)]:
            assert_not_rate_limited(answer)
        wait = assert_rate_limited(get(view))
        move(wait)
        assert_not_rate_limited(get(view))
        drf = DropInView.as_view()
        assert [get(drf).status_code for _ in range(3)] == [200, 200, 429]
        move(60)
        assert get(drf).status_code == 200
