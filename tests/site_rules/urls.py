"""Views for the RULES tests (tests/site_rules/test_rules.py)."""

from __future__ import annotations

from typing import ClassVar

from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.utils.decorators import method_decorator
from django.views import View
from rest_framework.decorators import api_view
from rest_framework.response import Response
from rest_framework.views import APIView

from django_rl.decorators import ratelimit
from django_rl.throttling import PolicyThrottle


def plain(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit("view_a")
def decorated(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit("view_a")
async def decorated_async(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit("view_a", block=False)
def not_blocking(request: HttpRequest) -> HttpResponse:
    return HttpResponse(f"limited={request.limited}")


@ratelimit("view_a")
class ClassBased(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")


class Throttled(APIView):
    throttle_classes: ClassVar[list[type]] = [PolicyThrottle]
    throttle_policies: ClassVar[list[str]] = ["view_a"]

    def get(self, request: object) -> Response:
        return Response({"ok": True})


class Unthrottled(APIView):
    throttle_classes: ClassVar[list[type]] = []

    def get(self, request: object) -> Response:
        return Response({"ok": True})


@ratelimit("rule_a")
@ratelimit("view_a")
class DecoratedDRF(APIView):
    """``@ratelimit`` on a DRF view: decided after DRF's authentication, not by the middleware."""

    throttle_classes: ClassVar[list[type]] = []

    def get(self, request: object) -> Response:
        return Response({"ok": True})


@api_view(["GET"])
@ratelimit("rule_a", "view_a")
def decorated_api_view(request: object) -> Response:
    return Response({"ok": True})


class MethodDecorated(View):
    """``method_decorator`` on ``get``: the middleware cannot see it before the view runs."""

    @method_decorator(ratelimit("rule_a"))
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")


class AsyncMethodDecorated(View):
    """The same on an async handler: decided on the loop (``Limit.adecide``)."""

    @method_decorator(ratelimit("rule_a"))
    async def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")


def whoami(request: HttpRequest) -> HttpResponse:
    return HttpResponse(str(request.user.pk))


urlpatterns = [
    path("plain/", plain),
    path("api/plain/", plain),
    path("api/decorated/", decorated),
    path("api/decorated-async/", decorated_async),
    path("api/not-blocking/", not_blocking),
    path("api/class/", ClassBased.as_view()),
    path("api/drf/", Throttled.as_view()),
    path("api/drf-open/", Unthrottled.as_view()),
    path("api/drf-decorated/", DecoratedDRF.as_view()),
    path("api/api-view/", decorated_api_view),
    path("api/method-decorated/", MethodDecorated.as_view()),
    path("api/async-method-decorated/", AsyncMethodDecorated.as_view()),
    path("health/", plain),
]
