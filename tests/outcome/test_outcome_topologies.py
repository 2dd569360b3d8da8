"""``count_when`` and ``charge`` on every topology: one server, a cluster, Sentinel.

Two policies of different identities (a client address, an account header)
live on different cluster slots: their hits are reserved slot by slot
(``together._decide_across``), and each slot's call is given back by a
``refund.lua`` of its own.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.http import HttpResponse
from django.test import RequestFactory

from django_rl import get_policy
from django_rl.decorators import ratelimit
from tests.outcome.site import ALGORITHMS, CLIENT, IDENTITY, spec

ACCOUNT = "alice"


def tokens(request: Any, response: Any) -> int:
    return int(request.GET.get("tokens", 0))


def used(name: str, identity: str) -> int:
    decision = get_policy(name).peek(identity)
    return decision.limit - decision.remaining


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_given_back_and_charged_on_every_topology(settings, topology, keyspace, algorithm):
    settings.DJANGO_RL = {
        "POLICIES": {
            "by_ip": spec(algorithm, "10/h", count_when="failure"),
            "by_account": {**spec(algorithm, "10/h"), "key": "header:X-Account"},
        }
    }

    @ratelimit("by_ip", "by_account", charge=tokens)
    def login(request: Any) -> HttpResponse:
        return HttpResponse(status=int(request.GET.get("status", 200)))

    def call(status: int, charged: int = 0) -> int:
        request = RequestFactory().get(
            "/", {"status": status, "tokens": charged}, REMOTE_ADDR=CLIENT, HTTP_X_ACCOUNT=ACCOUNT
        )
        return int(login(request).status_code)

    account = f"x-account:{ACCOUNT}"
    assert [call(200) for _ in range(3)] == [200] * 3
    assert (used("by_ip", IDENTITY), used("by_account", account)) == (0, 3)
    assert call(401, charged=2) == 401
    assert (used("by_ip", IDENTITY), used("by_account", account)) == (3, 6)
