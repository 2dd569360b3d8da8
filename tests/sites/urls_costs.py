"""Views whose ``@ratelimit`` arguments depend on the settings: costs and methods.

``per_minute`` allows 5 a minute and ``burst`` 3 at once (``tests/sites/settings.py``):
the costs of ``heavy``, ``HeavyClass`` and ``HeavyApi`` are above them
(``manage.py check``: django_rl.E014), that of ``fits`` is not.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.views import View
from rest_framework.response import Response
from rest_framework.views import APIView

from django_rl.decorators import ratelimit

#: How many times ``get_only`` ran.
RUNS = {"get_only": 0}


@ratelimit("per_minute", cost=6)
def heavy(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit("per_minute", cost=5)
def fits(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit("burst", cost=4)
class HeavyClass(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")


@ratelimit("per_minute", cost=6)
class HeavyApi(APIView):
    def get(self, request: Any) -> Response:
        return Response({"ok": True})


@ratelimit("writes", methods=["GET"])
def get_only(request: HttpRequest) -> HttpResponse:
    RUNS["get_only"] += 1
    return HttpResponse("ok")


urlpatterns = [
    path("heavy/", heavy),
    path("fits/", fits),
    path("heavy-class/", HeavyClass.as_view()),
    path("heavy-api/", HeavyApi.as_view()),
    path("get-only/", get_only),
]
