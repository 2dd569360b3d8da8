"""Redis unable to answer: ``count_when`` and ``charge`` never change a response.

A decision Redis cannot answer is degraded (``fail_open``, or the outage
fallback) and nothing is kept to give back; Redis gone between the decision
and the response: the response goes out unchanged, the hit stays counted,
nothing is charged, and the next decisions follow ``fail_open``.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.http import HttpResponse
from django.test import RequestFactory

from django_rl.decorators import ratelimit
from tests.outcome.site import ALGORITHMS, CLIENT, spec

pytestmark = pytest.mark.faults


def tokens(request: Any, response: Any) -> int:
    return 5


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_redis_gone_before_the_give_back(settings, private_redis, algorithm):
    settings.DJANGO_RL = {
        "POLICIES": {"login": spec(algorithm, count_when="success", charge=tokens)}
    }
    killed = []

    @ratelimit("login")
    def login(request: Any) -> HttpResponse:
        if request.GET.get("kill"):
            private_redis.kill()
            killed.append(True)
        return HttpResponse("nope", status=401)

    factory = RequestFactory()
    assert login(factory.post("/", REMOTE_ADDR=CLIENT)).status_code == 401
    response = login(factory.post("/?kill=1", REMOTE_ADDR=CLIENT))
    assert killed and response.status_code == 401 and response.content == b"nope"
    # Redis down: degraded decisions by fail_open (True), nothing kept, no error.
    request = factory.post("/", REMOTE_ADDR=CLIENT)
    assert login(request).status_code == 401
    assert [d.degraded for d in request.django_rl_decisions] == [True]  # type: ignore[attr-defined]
