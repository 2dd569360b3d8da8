"""A URLconf whose inline policies name dotted paths that do not import (checks' tests)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path

from django_rl.decorators import ratelimit


@ratelimit(rate="tests.support.plans.missing_rate", key="ip")
def missing_rate(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit(rate="3/h", key="tests.support.plans.missing_key")
def missing_key(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit(rate="tests.support.plans.PLANS", key="ip", cost=500)
def not_callable(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit("plans", cost=500)
def heavy_for_a_plan(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


urlpatterns = [
    path("missing-rate/", missing_rate),
    path("missing-key/", missing_key),
    path("not-callable/", not_callable),
    path("heavy-for-a-plan/", heavy_for_a_plan),
]
