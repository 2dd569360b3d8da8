"""Views for the rate forms and keys of issue 12: ``rate: None``, ``"0/<period>"``, new keys.

Each policy is named by a decorated view (sync, async, with a cost above any
limit) and by a DRF view's ``throttle_scope``; :data:`POLICIES` are the
settings the tests use (``tests/core/test_rate_forms.py``, ``tests/core/test_keys_http.py``).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView

from django_rl.decorators import ratelimit

POLICIES = {
    "off": {"algorithm": "fixed_window", "rate": None, "key": "ip"},
    "off_bucket": {"algorithm": "token_bucket", "capacity": 3, "rate": None, "key": "ip"},
    "blocked": {"algorithm": "sliding_log", "rate": "0/m", "key": "ip"},
    "blocked_bucket": {"algorithm": "token_bucket", "capacity": 3, "rate": "0/10", "key": "ip"},
    "per_minute": {"algorithm": "fixed_window", "rate": "5/m", "key": "ip"},
    "drf_minute": {"algorithm": "fixed_window", "rate": "3/min", "key": "ip"},
    "api_key": {"algorithm": "fixed_window", "rate": "2/m", "key": "header:X-Api-Key"},
    "page": {"algorithm": "fixed_window", "rate": "2/m", "key": "get:page"},
    "username": {"algorithm": "fixed_window", "rate": "2/m", "key": "post:username"},
    "anon": {"algorithm": "fixed_window", "rate": "2/m", "key": "anon"},
}


def ok(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


async def ok_async(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


def scoped(scope: str) -> Any:
    """Return a DRF view limited by ``PolicyThrottle`` with ``throttle_scope = scope``."""

    class Scoped(APIView):
        throttle_scope = scope

        def get(self, request: Any) -> Response:
            return Response({"ok": True})

        def post(self, request: Any) -> Response:
            return Response({"ok": True})

    Scoped.__name__ = Scoped.__qualname__ = f"Scoped_{scope}"
    return Scoped.as_view()


NAMES = list(POLICIES)

urlpatterns = [
    *(path(f"{name}/", ratelimit(name)(ok)) for name in NAMES),
    *(path(f"{name}/async/", ratelimit(name)(ok_async)) for name in NAMES),
    *(path(f"{name}/api/", scoped(name)) for name in NAMES),
    # A cost above every limit: E014 for positive rates, but not for None or 0/<period>.
    path("off/heavy/", ratelimit("off", cost=10**6)(ok)),
    path("blocked/heavy/", ratelimit("blocked", cost=10**6)(ok)),
    # Two policies at once: one that never limits, one that counts.
    path("off-and-minute/", ratelimit("off", "per_minute")(ok)),
]
