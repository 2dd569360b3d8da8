"""The example project's URLs, an unlimited twin of each limited view, and a floor twin.

A floor twin is the unlimited twin plus one round trip to Redis and nothing
else: a PING, sent already encoded on the kept connection django_rl's
decisions use. No limiter that asks Redis once per request can cost less;
``bench/endtoend.py`` measures it in the same run as the others.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.views import View

from django_rl.backends.aio_pools import async_pipe
from django_rl.backends.node import RedisNode
from django_rl.backends.redis import get_backend
from django_rl.decorators import ratelimit
from example_project import views
from example_project.urls import urlpatterns as example_urlpatterns


class OpenItemsView(views.ItemsView):
    """``ItemsView`` (DRF, PolicyThrottle on the ``api`` policy) with no throttle."""

    throttle_classes = ()


class OpenBurstView(View):
    """``BurstView`` (``@ratelimit("burst")``) without the decorator."""

    def get(self, request: HttpRequest) -> HttpResponse:
        return JsonResponse({"ok": True})


#: PING in RESP, as a decision's EVALSHA is sent: encoded once.
PING = b"*1\r\n$4\r\nPING\r\n"


def one_round_trip() -> None:
    """Send a PING on this thread's kept connection to the policies' Redis; read its reply."""
    client = get_backend("default").client
    if not client.direct_ready():
        raise RuntimeError("the kept connection cannot take an encoded command here")
    if client.send_encoded(PING) != b"PONG":
        raise RuntimeError("PING did not answer PONG")


class FloorItemsView(OpenItemsView):
    """``OpenItemsView`` plus one round trip to Redis."""

    def get(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        one_round_trip()
        return super().get(request, *args, **kwargs)


class FloorBurstView(OpenBurstView):
    """``OpenBurstView`` plus one round trip to Redis."""

    def get(self, request: HttpRequest) -> HttpResponse:
        one_round_trip()
        return super().get(request)


@ratelimit("burst")
async def async_burst(request: HttpRequest) -> HttpResponse:
    """An async view limited by ``burst`` (token bucket): decided on the event loop."""
    return JsonResponse({"ok": True})


async def open_async_burst(request: HttpRequest) -> HttpResponse:
    """``async_burst`` without the decorator."""
    return JsonResponse({"ok": True})


async def one_async_round_trip() -> None:
    """Await a PING on the loop's auto-pipelined connection, the one async decisions use."""
    node = get_backend("default")
    assert isinstance(node, RedisNode), "the floor twin needs one Redis server"
    pipe = await async_pipe(node)
    if pipe is None:
        raise RuntimeError("this connection cannot be auto-pipelined (TLS, RESP3, Sentinel)")
    (reply,) = await pipe.exchange(PING, 1)
    if reply not in (b"PONG", "PONG"):
        raise RuntimeError(f"PING answered {reply!r}")


async def floor_async_burst(request: HttpRequest) -> HttpResponse:
    """``open_async_burst`` plus one round trip to Redis, awaited on the same connection."""
    await one_async_round_trip()
    return JsonResponse({"ok": True})


urlpatterns = [
    *example_urlpatterns,
    path("open/api/items/", OpenItemsView.as_view()),
    path("open/burst/", OpenBurstView.as_view()),
    path("floor/api/items/", FloorItemsView.as_view()),
    path("floor/burst/", FloorBurstView.as_view()),
    path("async/burst/", async_burst),
    path("open/async/burst/", open_async_burst),
    path("floor/async/burst/", floor_async_burst),
]
