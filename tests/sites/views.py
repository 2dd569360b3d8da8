"""Views the HTTP tests call, one per way of using the front doors."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.utils.decorators import method_decorator
from django.views import View
from rest_framework.response import Response
from rest_framework.views import APIView

from django_rl.decorators import ratelimit


@ratelimit("per_minute")
def limited(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit("per_minute")
async def limited_async(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit("writes", methods=["POST"])
def writes_only(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit("per_minute")
class LimitedClassView(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")


@ratelimit("per_minute")
class LimitedAsyncClassView(View):
    async def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")


@method_decorator(ratelimit("per_minute"), name="dispatch")
class MethodDecoratedView(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")


class ScopedApiView(APIView):
    throttle_scope = "per_minute"

    def get(self, request: object) -> Response:
        return Response({"ok": True})


class UnscopedApiView(APIView):
    def get(self, request: object) -> Response:
        return Response({"ok": True})
