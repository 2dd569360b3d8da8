"""Views limited by three policies at once, through each front door
(tests/policies/test_together.py)."""

from __future__ import annotations

from typing import ClassVar

from django.http import HttpRequest, HttpResponse
from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView

from django_rl.decorators import ratelimit
from django_rl.throttling import PolicyThrottle


@ratelimit("burst", "sustained", "daily")
def three(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit("burst", "sustained", "daily")
async def three_async(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


class ThreeApi(APIView):
    throttle_classes: ClassVar[list[type]] = [PolicyThrottle]
    throttle_scope = "burst"
    throttle_policies = ("sustained", "daily")

    def get(self, request: object) -> Response:
        return Response({"ok": True})


urlpatterns = [
    path("three/", three),
    path("three-async/", three_async),
    path("api/three/", ThreeApi.as_view()),
]
