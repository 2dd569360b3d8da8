"""``charge``: points counted after the response on top of the cost, as ``penalize`` counts them.

A charge may take the identity past its limit; its next requests are denied
until time pays it back, with a true ``Retry-After``. A charge callable that
raises or returns junk charges nothing and logs one warning; a view that
raises is charged nothing; ``count_when`` that gives the hit back charges
nothing either.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

import pytest
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpResponse
from django.test import Client, RequestFactory

from django_rl import get_policy
from django_rl.decorators import ratelimit
from tests.conftest import server_ms
from tests.outcome.site import ALGORITHMS, CLIENT, IDENTITY, spec
from tests.support.asgi import asgi_get

#: 10/h: one unit every 360 s.
INTERVAL = 360


def used(name: str = "llm") -> int:
    decision = get_policy(name).peek(IDENTITY)
    return decision.limit - decision.remaining


def tokens(request: Any, response: Any) -> int:
    return int(response["X-Tokens"])


def answering(tokens_used: int, status: int = 200) -> Any:
    def view(request: Any) -> HttpResponse:
        response = HttpResponse("done", status=status)
        response["X-Tokens"] = str(tokens_used)
        return response

    return view


def call(view: Any) -> Any:
    return view(RequestFactory().post("/", REMOTE_ADDR=CLIENT))


@pytest.fixture(autouse=True)
def _policies(settings: Any) -> None:
    settings.ROOT_URLCONF = "tests.outcome.test_charge"
    settings.DJANGO_RL = {
        "POLICIES": {
            **{f"llm_{a}": spec(a, "10/h", charge=tokens) for a in ALGORITHMS},
            "llm": spec("sliding_log", "10/h"),
        }
    }


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_charge_may_pass_the_limit_and_denies_until_time_pays_it_back(redis_client, algorithm):
    name = f"llm_{algorithm}"
    heavy = ratelimit(name)(answering(7))
    assert call(heavy).status_code == 200
    assert used(name) == 8  # the cost, 1, and the charge, 7
    assert call(heavy).status_code == 200  # 9 of 10 before it: allowed, then charged
    assert used(name) == 10  # (remaining never below 0)
    denied = call(ratelimit(name)(answering(0)))
    assert denied.status_code == 429
    retry_after = int(denied["Retry-After"])
    assert retry_after == math.ceil(get_policy(name).peek(IDENTITY).retry_after)
    # The true wait: 16 units used of 10, a hit of 1 fits once 7 have gone.
    if algorithm in ("token_bucket", "gcra"):
        assert abs(retry_after - 7 * INTERVAL) <= 2
    elif algorithm == "sliding_log":
        assert 3600 - 5 <= retry_after <= 3600  # the first two entries leave together
    elif algorithm == "fixed_window":
        left = (3_600_000 - server_ms(redis_client) % 3_600_000) / 1000
        assert abs(retry_after - left) <= 2
    else:  # sliding_window: this window's 16 slide out during the next one
        assert retry_after > 0


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_decorators_charge_on_a_named_policy(algorithm):
    name = f"plain_{algorithm}"
    view = ratelimit(name, charge=tokens)(answering(3))
    with_settings = spec(algorithm, "10/h")
    from django.test import override_settings

    with override_settings(DJANGO_RL={"POLICIES": {name: with_settings}}):
        call(view)
        assert used(name) == 4


def test_nothing_is_charged_for_a_view_that_raises_or_a_hit_given_back():
    def broken(request: Any) -> HttpResponse:
        raise RuntimeError("the model is down")

    view = ratelimit("llm", charge=tokens)(broken)
    with pytest.raises(RuntimeError):
        call(view)
    assert used() == 1
    given_back = ratelimit("llm", charge=tokens, count_when="success")(answering(5, status=500))
    call(given_back)
    assert used() == 1


def test_a_charge_of_zero_charges_nothing():
    call(ratelimit("llm", charge=tokens)(answering(0)))
    assert used() == 1


def charges_nonsense(request: Any, response: Any) -> Any:
    return -3


def charges_a_float(request: Any, response: Any) -> Any:
    return 2.0


def charge_breaks(request: Any, response: Any) -> int:
    raise ValueError("no tokens header")


@pytest.mark.parametrize(
    ("function", "cause"),
    [
        (charges_nonsense, "returned -3"),
        (charges_a_float, "returned 2.0"),
        (charge_breaks, "raised ValueError: no tokens header"),
    ],
)
def test_a_charge_that_fails_charges_nothing_and_warns_once(caplog, function, cause):
    view = ratelimit("llm", charge=function)(answering(0))
    with caplog.at_level(logging.WARNING, logger="django_rl"):
        responses = [call(view) for _ in range(3)]
    assert [r.status_code for r in responses] == [200] * 3
    assert [r.content for r in responses] == [b"done"] * 3
    assert used() == 3
    lines = [r for r in caplog.records if cause in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert function.__qualname__ in lines[0].getMessage()


@ratelimit("llm", charge=tokens)
async def async_llm(request: Any) -> HttpResponse:
    return answering(4)(request)


urlpatterns: list[Any] = []


def test_an_async_view_is_charged_on_the_loop(settings):
    from django.urls import path

    urlpatterns[:] = [path("llm/", async_llm)]
    status, _ = asyncio.run(asgi_get(ASGIHandler(), "/llm/", CLIENT))
    assert status == 200
    assert used() == 5
    # And served by WSGI (the test client), through the sync path.
    assert Client(REMOTE_ADDR=CLIENT).get("/llm/").status_code == 200
    assert used() == 10


def test_a_drf_throttle_charges_after_the_response():
    from django.urls import path
    from rest_framework.response import Response
    from rest_framework.views import APIView

    from django_rl.throttling import PolicyThrottle

    class Completion(APIView):
        authentication_classes = ()
        permission_classes = ()
        throttle_classes = (PolicyThrottle,)
        throttle_scope = "llm_gcra"

        def post(self, request: Any) -> Response:
            return Response({"done": True}, headers={"X-Tokens": "6"})

    urlpatterns[:] = [path("complete/", Completion.as_view())]
    web = Client(REMOTE_ADDR=CLIENT)
    assert web.post("/complete/").status_code == 200
    assert used("llm_gcra") == 7
    assert web.post("/complete/").status_code == 200  # 8 of 10, then 14
    denied = web.post("/complete/")
    assert denied.status_code == 429
    assert abs(int(denied["Retry-After"]) - 5 * INTERVAL) <= 2
