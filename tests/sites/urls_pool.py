"""A URL for the full-pool tests: an async view that holds its request's thread a while."""

from __future__ import annotations

import asyncio

from django.http import HttpRequest, HttpResponse
from django.urls import path

from django_rl.decorators import ratelimit

#: How long the view keeps its request (and so the request's sync thread) alive
#: after the decision: every request's thread is alive at once, as under load.
HOLD_SECONDS = 0.3


@ratelimit("pooled")
async def held(request: HttpRequest) -> HttpResponse:
    await asyncio.sleep(HOLD_SECONDS)
    return HttpResponse("ok")


urlpatterns = [path("held/", held)]
