"""Views of the example site: one per way of using django_rl."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views import View
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from django_rl import Policy, get_policy
from django_rl.decorators import ratelimit

#: What the home page lets a visitor fire requests at.
TARGETS = [
    {
        "policy": "login",
        "url": "/login/",
        "method": "POST",
        "burst": 7,
        "about": "a wrong password each time; POSTs count, 5 a minute per address.",
    },
    {
        "policy": "burst",
        "url": "/burst/",
        "method": "GET",
        "burst": 5,
        "about": "bursts of 3, then 1 a second: wait a second and one more gets through.",
    },
    {
        "policy": "search",
        "url": "/search/",
        "method": "GET",
        "burst": 15,
        "about": "in shadow mode: 10 a minute per address would be the limit, but it never "
        "denies; the charts, /metrics/ and the log show what it would have denied.",
    },
    {
        "policy": "api",
        "url": "/api/items/",
        "method": "GET",
        "burst": 25,
        "about": "a DRF view throttled by PolicyThrottle through its throttle_scope.",
    },
]


def home(request: HttpRequest) -> HttpResponse:
    """The demo page: buttons that fire requests at each policy."""
    targets = []
    for target in TARGETS:
        policy = get_policy(target["policy"])
        targets.append({**target, "algorithm": policy.algorithm.name, "limit": _limit(policy)})
    return render(request, "example/home.html", {"targets": targets})


def _limit(policy: Policy) -> str:
    algorithm = policy.algorithm
    rate = getattr(algorithm, "rate", None)
    if algorithm.name == "token_bucket":
        return f"capacity {policy.limit}, refill {rate}"
    return str(rate)


@ratelimit("login", methods=["POST"])
def login(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        return HttpResponse("Wrong password (but you may try again).\n", status=401)
    return HttpResponse("POST here to try a password; 5 tries a minute.\n")


@ratelimit("search")
def search(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"results": ["apple", "pear"], "limited": request.limited})


@ratelimit("burst")
class BurstView(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return JsonResponse({"ok": True})


class ItemsSerializer(serializers.Serializer[dict[str, list[str]]]):
    """What /api/items/ answers (for the OpenAPI schema)."""

    items = serializers.ListField(child=serializers.CharField())


class ItemsView(APIView):
    throttle_scope = "api"
    serializer_class = ItemsSerializer

    def get(self, request: Request) -> Response:
        return Response({"items": ["apple", "pear"]})
