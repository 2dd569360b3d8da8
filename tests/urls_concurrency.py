"""Views limited by a ``concurrency`` policy (tests/test_concurrency_limit.py).

Each view reports the slots left while it runs, so the tests can see that
its request holds one.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.http import HttpResponse, StreamingHttpResponse
from django.urls import path
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


urlpatterns = [
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
