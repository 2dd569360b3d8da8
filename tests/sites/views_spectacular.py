"""DRF views limited every way the OpenAPI hook knows, and one not limited (test_openapi.py)."""

from __future__ import annotations

from typing import Any, ClassVar

from django.utils.decorators import method_decorator
from rest_framework.decorators import api_view
from rest_framework.response import Response
from rest_framework.throttling import AnonRateThrottle as DrfAnonRateThrottle
from rest_framework.views import APIView
from rest_framework.viewsets import ViewSet

from django_rl.contrib import drf as dropin
from django_rl.decorators import ratelimit
from django_rl.throttling import PolicyThrottle


class Plain(APIView):
    throttle_classes: ClassVar[list[type]] = []

    def get(self, request: Any) -> Response:
        return Response({})

    def post(self, request: Any) -> Response:
        return Response({})


class Throttled(Plain):
    throttle_classes: ClassVar[list[type]] = [PolicyThrottle]
    throttle_scope = "burst"
    throttle_policies: ClassVar[list[str]] = ["daily"]


class OwnThrottles(Plain):
    """Throttles from ``get_throttles``, not ``throttle_classes``."""

    throttle_scope = "daily"

    def get_throttles(self) -> list[Any]:
        return [PolicyThrottle()]


class Unnamed(Plain):
    """PolicyThrottle, but no policy named and no DEFAULT_POLICY: not limited."""

    throttle_classes: ClassVar[list[type]] = [PolicyThrottle]


class DropIn(Plain):
    throttle_classes: ClassVar[list[type]] = [dropin.AnonRateThrottle]


class Scoped(Plain):
    throttle_classes: ClassVar[list[type]] = [dropin.ScopedRateThrottle]
    throttle_scope = "uploads"


class DrfOwn(Plain):
    """DRF's own throttle, not django_rl's: left alone."""

    throttle_classes: ClassVar[list[type]] = [DrfAnonRateThrottle]


@ratelimit("burst", methods=["POST"])
class PostsOnly(Plain):
    pass


@ratelimit(rate="7/m", key="ip")
class Inline(Plain):
    pass


class HandlerDecorated(Plain):
    @method_decorator(ratelimit("daily"))
    def post(self, request: Any) -> Response:
        return Response({})


@ratelimit("burst")
@api_view(["GET"])
def above(request: Any) -> Response:
    return Response({})


@api_view(["GET", "POST"])
@ratelimit("daily", methods=["POST"])
def below(request: Any) -> Response:
    return Response({})


@ratelimit("burst")
class Things(ViewSet):
    throttle_classes: ClassVar[list[type]] = []

    def list(self, request: Any) -> Response:
        return Response([])

    def retrieve(self, request: Any, pk: str) -> Response:
        return Response({})
