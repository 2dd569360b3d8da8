"""Views limited by a ``concurrency`` policy (tests/algorithms/test_concurrency_limit.py).

Each view reports the slots left while it runs, so the tests can see that
its request holds one.
"""

from __future__ import annotations

import threading
import time

from asgiref.sync import sync_to_async
from django.http import HttpResponse, StreamingHttpResponse
from django.urls import path
from django.utils.decorators import method_decorator
from django.views.decorators.cache import cache_page
from rest_framework.response import Response
from rest_framework.views import APIView

from django_rl import get_policy
from django_rl.decorators import ratelimit
from django_rl.throttling import PolicyThrottle

IDENTITY = "ip:127.0.0.1"


def left() -> str:
    return str(get_policy("slots").peek(IDENTITY).remaining)


@ratelimit("slots")
def plain(request):
    return HttpResponse(left())


@ratelimit("slots", cost=2)
def heavy(request):
    return HttpResponse(left())


@ratelimit("slots")
def streaming(request):
    def chunks():
        yield left()
        yield ","
        yield left()

    return StreamingHttpResponse(chunks())


@ratelimit("slots")
def raising(request):
    raise ValueError(left())


@ratelimit("slots")
async def asynchronous(request):
    return HttpResponse(await sync_to_async(left)())


@ratelimit("slots", "once")
def two_policies(request):
    return HttpResponse(left())


class Throttled(APIView):
    throttle_classes = (PolicyThrottle,)
    throttle_scope = "slots"

    def get(self, request):
        return Response({"left": left()})


class ThrottledRaising(Throttled):
    def get(self, request):
        raise ValueError(left())


@ratelimit("slots")
class Decorated(APIView):
    def get(self, request):
        return Response({"left": left()})


@cache_page(60)
@ratelimit("slots")
def cached(request):
    return HttpResponse(left())


@cache_page(60, cache="locmem")
@ratelimit("slots")
def cached_locmem(request):
    return HttpResponse(left())


@ratelimit("slots")
@cache_page(60)
def limited_then_cached(request):
    return HttpResponse(left())


@ratelimit("slots")
def tagged(request):
    """An ETag that never changes: ConditionalGetMiddleware answers a revalidation 304."""
    response = HttpResponse(left())
    response["ETag"] = '"v1"'
    return response


#: Set by ``slow`` (and its DRF twin) once the view runs; the ASGI tests
#: disconnect then.
running = threading.Event()


@ratelimit("slots")
def slow(request):
    running.set()
    time.sleep(0.3)
    return HttpResponse(left())


#: Set by ``slow_identity`` when it is called, and when it returns (a time.monotonic()).
deciding = threading.Event()
decided_at: list[float] = []


def slow_identity(request):
    """The identity, slowly: the tests cancel the request while it is being decided."""
    deciding.set()
    time.sleep(0.3)
    decided_at.append(time.monotonic())
    return IDENTITY


@ratelimit("slow_slots")
async def slow_to_decide(request):
    return HttpResponse("the client left before this")


@method_decorator(cache_page(60), name="dispatch")
class CachedThrottled(Throttled):
    pass


@method_decorator(cache_page(60), name="dispatch")
class CachedDecorated(Decorated):
    pass


class TaggedThrottled(Throttled):
    def get(self, request):
        return Response({"left": left()}, headers={"ETag": '"v1"'})


class SlowThrottled(Throttled):
    def get(self, request):
        running.set()
        time.sleep(0.3)
        return Response({"left": left()})


urlpatterns = [
    path("cached/", cached),
    path("cached-locmem/", cached_locmem),
    path("limited-then-cached/", limited_then_cached),
    path("tagged/", tagged),
    path("slow/", slow),
    path("slow-to-decide/", slow_to_decide),
    path("drf-cached/", CachedThrottled.as_view()),
    path("drf-decorated-cached/", CachedDecorated.as_view()),
    path("drf-tagged/", TaggedThrottled.as_view()),
    path("drf-slow/", SlowThrottled.as_view()),
    path("plain/", plain),
    path("heavy/", heavy),
    path("streaming/", streaming),
    path("raising/", raising),
    path("async/", asynchronous),
    path("two/", two_policies),
    path("drf/", Throttled.as_view()),
    path("drf-raising/", ThrottledRaising.as_view()),
    path("drf-decorated/", Decorated.as_view()),
]
