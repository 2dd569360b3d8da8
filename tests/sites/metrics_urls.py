"""The metrics test site's views: every response says which worker made it (``X-Worker``).

So the test knows how many denials each process's deny cache answered.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import path

from django_rl.decorators import ratelimit
from django_rl.observability.metrics import metrics_view


def worker_header(get_response: Callable[[HttpRequest], Any]) -> Any:
    def middleware(request: HttpRequest) -> Any:
        response = get_response(request)
        response["X-Worker"] = str(os.getpid())
        return response

    return middleware


@ratelimit("enforced")
def enforced(request: HttpRequest) -> HttpResponse:
    """``?sleep=<seconds>`` holds the worker that long (at most 2 s)."""
    time.sleep(min(float(request.GET.get("sleep", 0)), 2.0))
    return HttpResponse("ok")


@ratelimit("shadowed")
def shadowed(request: HttpRequest) -> HttpResponse:
    """``?sleep=<seconds>`` as :func:`enforced`'s."""
    time.sleep(min(float(request.GET.get("sleep", 0)), 2.0))
    return HttpResponse("ok")


urlpatterns = [
    path("enforced/", enforced),
    path("shadowed/", shadowed),
    path("metrics/", metrics_view),
]
