"""Views for the django-ratelimit drop-in's tests (tests/contrib/test_contrib_ratelimit.py)."""

from __future__ import annotations

from django.http import HttpResponse, JsonResponse
from django.utils.decorators import method_decorator
from django.views.generic import View

from django_rl.contrib.ratelimit.decorators import ratelimit


@ratelimit(key="ip", rate="2/m")
def blocked(request):
    return HttpResponse("ok")


@ratelimit(key="ip", rate="2/m", block=False)
def annotated(request):
    return JsonResponse({"limited": request.limited})


@ratelimit(key="ip", rate="1/m", method=["GET"], block=False)
def get_only(request):
    return JsonResponse({"limited": request.limited})


class ClassView(View):
    @method_decorator(ratelimit(key="ip", rate="1/m", method="GET"))
    def get(self, request):
        return HttpResponse("ok")


def ratelimited_view(request, exception):
    """``RATELIMIT_VIEW`` of the tests: a 429 naming the exception."""
    return JsonResponse({"error": type(exception).__name__}, status=429)


def mykey(group, request):
    """A key by dotted path: the address, reversed."""
    return request.META["REMOTE_ADDR"][::-1]


def callable_rate(group, request):
    """A rate by dotted path: none for users, nothing allowed for the others."""
    if request.user.is_authenticated:
        return None
    return (0, 1)


def my_ip(request):
    """``RATELIMIT_IP_META_KEY`` by dotted path."""
    return request.META["MY_THING"]


class CustomRatelimitedException(Exception):
    pass
