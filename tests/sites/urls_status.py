"""The status view (tests/usage/test_status_view.py): plain and async, and a view to count."""

from __future__ import annotations

from django.http import HttpResponse
from django.urls import path

from django_rl.decorators import ratelimit
from django_rl.views import arate_limit_status, rate_limit_status


@ratelimit("fw")
def limited(request):
    return HttpResponse("ok")


urlpatterns = [
    path("rate_limit/", rate_limit_status),
    path("rate_limit/async/", arate_limit_status),
    path("limited/", limited),
]
