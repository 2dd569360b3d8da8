"""Views with inline policies (``@ratelimit(rate=...)``), one per way of using them."""

from __future__ import annotations

from typing import Any, ClassVar

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.decorators import method_decorator
from django.views import View
from rest_framework.authentication import BasicAuthentication
from rest_framework.response import Response
from rest_framework.views import APIView

from django_rl.decorators import ratelimit


def said(request: Any) -> JsonResponse:
    """Answer with what the view saw: ``request.limited`` and the request's Decisions."""
    return JsonResponse(
        {
            "limited": request.limited,
            "decisions": [[d.policy, d.allowed, d.remaining] for d in request.django_rl_decisions],
        }
    )


@ratelimit(rate="3/h", key="ip")
def inline_view(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit(rate="3/h", key="ip")
async def inline_async(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit(rate="3/h", key="ip")
class InlineClass(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")


@ratelimit(rate="3/h", key="ip")
class InlineAsyncClass(View):
    async def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")


@method_decorator(ratelimit(rate="3/h", key="ip"), name="dispatch")
class InlineMethodDecorated(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")


@ratelimit(rate="3/h", key="ip", group="shared")
def shared_a(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit(rate="3/h", key="ip", group="shared")
def shared_b(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit(rate="5/h", key="ip", group="shared")
def shared_other_rate(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit(rate="3/h", key="user_or_ip", group="shared")
def shared_other_key(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit(rate="2/h", key="ip", algorithm="sliding_log", group="logins, any text: é")
def any_group(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit(rate="5/h", key="ip", group="per_minute")
def named_like_a_policy(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit(rate="2/h", key="ip", block=False)
def soft(request: HttpRequest) -> HttpResponse:
    return said(request)


@ratelimit(rate="2/h", key="ip", block=False)
async def soft_async(request: HttpRequest) -> HttpResponse:
    return said(request)


@ratelimit(rate="2/h", key="ip", block=False, methods=["POST"])
def soft_posts(request: HttpRequest) -> HttpResponse:
    return said(request)


@ratelimit(rate="tests.support.plans.rate_for_user", key="user", block=False)
def plan_view(request: HttpRequest) -> HttpResponse:
    return said(request)


@ratelimit(rate="tests.support.plans.tiny_rate", key="ip", cost=5)
def too_heavy_for_its_plan(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit(rate="tests.support.plans.from_header", key="ip")
def rate_from_header(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


class BasicApi(APIView):
    authentication_classes: ClassVar[list[type]] = [BasicAuthentication]

    def get(self, request: Any) -> Response:
        return Response(
            {
                "user": request.user.username or None,
                "limited": request.limited,
                "decisions": [[d.policy, d.allowed] for d in request.django_rl_decisions],
            }
        )


@ratelimit(rate="3/h", key="user")
class InlineApi(BasicApi):
    pass


@ratelimit(rate="2/h", key="user", block=False)
class SoftApi(BasicApi):
    pass


class PlanThrottledApi(BasicApi):
    """PolicyThrottle (the settings' default throttle) with a per-plan policy, ``plans``."""

    throttle_scope = "plans"
