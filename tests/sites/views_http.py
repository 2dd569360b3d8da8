"""Views for the HTTP semantics tests: headers, 429 bodies, RateLimited, async, DRF."""

from __future__ import annotations

from typing import ClassVar

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from rest_framework.response import Response
from rest_framework.views import APIView

from django_rl import get_policy
from django_rl.core.identities import client_ip
from django_rl.core.recording import record
from django_rl.decorators import ratelimit
from django_rl.exceptions import RateLimited


@ratelimit("single")
def single(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit("burst", "sustained")
def several(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit("single")
async def single_async(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit("single")
def missing(request: HttpRequest) -> HttpResponse:
    raise Http404("no such thing")


async def plain_async(request: HttpRequest) -> HttpResponse:
    """Not limited: the baseline the async tests measure the decorator against."""
    return HttpResponse("ok")


def raises(request: HttpRequest) -> HttpResponse:
    """Decide by hand and raise, the way code that prefers exceptions does."""
    decision = get_policy("export").hit(client_ip(request))
    if not decision.allowed:
        raise RateLimited(decision)
    return HttpResponse("ok")


def recorded(request: HttpRequest) -> HttpResponse:
    """Decide by hand and report it: RateLimitMiddleware writes the headers."""
    decision = get_policy("export").hit(client_ip(request))
    record(request, [decision])
    if not decision.allowed:
        raise RateLimited(decision)
    return HttpResponse("ok")


def rate_limited(request: HttpRequest, exception: RateLimited) -> HttpResponse:
    """A RATELIMITED_VIEW: the site's own 429 page."""
    return JsonResponse(
        {"error": "slow down", "policy": exception.decision.policy, "wait": exception.retry_after},
        status=429,
    )


class SingleApi(APIView):
    throttle_scope = "single"

    def get(self, request: object) -> Response:
        return Response({"ok": True})


class SeveralApi(APIView):
    throttle_scope = "burst"
    throttle_policies: ClassVar[list[str]] = ["sustained"]  # a list, as users write it

    def get(self, request: object) -> Response:
        return Response({"ok": True})


class PoliciesOnlyApi(APIView):
    throttle_policies = ("burst", "sustained")

    def get(self, request: object) -> Response:
        return Response({"ok": True})


class RaisingApi(APIView):
    def get(self, request: object) -> Response:
        decision = get_policy("export").hit("ip:198.51.100.7")
        if not decision.allowed:
            raise RateLimited(decision)
        return Response({"ok": True})
