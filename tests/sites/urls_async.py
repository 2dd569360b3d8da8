"""Async views for tests/http/test_async_decisions_http.py: decided on the event loop."""

from __future__ import annotations

import threading
from typing import Any

from django.http import HttpResponse, JsonResponse, StreamingHttpResponse
from django.urls import path
from django.views import View

from django_rl.decorators import ratelimit

#: Thread idents seen: by the key callables, and by each view's first line.
SEEN: dict[str, list[int]] = {"async_key": [], "sync_key": [], "view": []}


async def async_key(request: Any) -> str:
    SEEN["async_key"].append(threading.get_ident())
    return "tenant:async"


def sync_key(request: Any) -> str:
    SEEN["sync_key"].append(threading.get_ident())
    return "tenant:sync"


async def async_rate(request: Any) -> str:
    return "3/m"


@ratelimit(rate="5/m", key="ip", algorithm="sliding_log")
async def limited(request: Any) -> HttpResponse:
    SEEN["view"].append(threading.get_ident())
    return HttpResponse("ok")


@ratelimit(rate="5/m", key="ip", algorithm="sliding_log")
def limited_sync(request: Any) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit(rate="100/m", key="ip", algorithm="sliding_window")
async def hundred(request: Any) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit(rate="2/m", key="ip", block=False)
async def not_blocking(request: Any) -> HttpResponse:
    return JsonResponse({"limited": request.limited})


@ratelimit(rate="4/m", key="tests.sites.urls_async.async_key")
async def by_async_key(request: Any) -> HttpResponse:
    SEEN["view"].append(threading.get_ident())
    return HttpResponse("ok")


@ratelimit(rate="4/m", key="tests.sites.urls_async.sync_key")
async def by_sync_key(request: Any) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit(rate="tests.sites.urls_async.async_rate", key="ip")
async def by_async_rate(request: Any) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit(rate="3/m", key="ip")
class AsyncClassView(View):
    async def get(self, request: Any) -> HttpResponse:
        return HttpResponse("class")


@ratelimit("two_a", "two_b")
async def two(request: Any) -> HttpResponse:
    return HttpResponse("two")


#: Set by the test once it has looked at Redis during the stream.
RESUME: list[Any] = []


@ratelimit("slots")
async def streaming(request: Any) -> StreamingHttpResponse:
    async def chunks() -> Any:
        yield b"first "
        await RESUME[0].wait()
        yield b"last"

    return StreamingHttpResponse(chunks())


urlpatterns = [
    path("streaming/", streaming),
    path("limited/", limited),
    path("limited-sync/", limited_sync),
    path("hundred/", hundred),
    path("not-blocking/", not_blocking),
    path("async-key/", by_async_key),
    path("sync-key/", by_sync_key),
    path("async-rate/", by_async_rate),
    path("class/", AsyncClassView.as_view()),
    path("two/", two),
]
