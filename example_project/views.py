"""Views of the example site: one per way of using django_rl."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import View
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from django_rl.decorators import ratelimit


def home(request: HttpRequest) -> HttpResponse:
    return HttpResponse(
        "<h1>django_rl example</h1><ul>"
        '<li><a href="/login/">/login/</a>: sliding log, 5/m per address (POST counts)</li>'
        '<li><a href="/burst/">/burst/</a>: token bucket, bursts of 3, then 1/s</li>'
        '<li><a href="/api/items/">/api/items/</a>: DRF, fixed window, 1000/h</li>'
        '<li><a href="/admin/">/admin/</a></li></ul>'
    )


@ratelimit("login", methods=["POST"])
def login(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        return HttpResponse("Wrong password (but you may try again).\n", status=401)
    return HttpResponse("POST here to try a password; 5 tries a minute.\n")


@ratelimit("burst")
class BurstView(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return JsonResponse({"ok": True})


class ItemsView(APIView):
    throttle_scope = "api"

    def get(self, request: Request) -> Response:
        return Response({"items": ["apple", "pear"]})
