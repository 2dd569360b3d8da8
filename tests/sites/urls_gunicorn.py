"""The views of ``tests/sites/settings_gunicorn.py``, and the middleware that says who decided.

Every response carries ``X-Worker`` (the pid of the gunicorn worker that
served it) and ``X-Decided`` (what decided the request's policy:
``redis``, ``local`` for the outage fallback, ``fail-open`` for a degraded
decision without a count), so the test can count each process's admissions.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView

from django_rl.core.recording import recorded
from django_rl.decorators import ratelimit


def decided_by(get_response: Callable[[HttpRequest], HttpResponse]) -> Callable[..., HttpResponse]:
    """Middleware: add ``X-Worker`` and ``X-Decided`` to every response."""

    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        response["X-Worker"] = str(os.getpid())
        decisions = recorded(request)
        if decisions:
            (decision,) = decisions  # each view has one policy
            if decision.fallback:
                response["X-Decided"] = "local"
            else:
                response["X-Decided"] = "fail-open" if decision.degraded else "redis"
        return response

    return middleware


@ratelimit("login")
def login(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


class LoginApiView(APIView):
    throttle_scope = "login"

    def get(self, request: object) -> Response:
        return Response({"ok": True})


def ready(request: HttpRequest) -> HttpResponse:
    """Unlimited; holds the worker a moment, so that concurrent calls reach every worker."""
    time.sleep(0.2)
    return HttpResponse("ready")


urlpatterns = [
    path("login/", login),
    path("api/login/", LoginApiView.as_view()),
    path("ready/", ready),
]
