"""A URLconf whose DRF views name policies badly, for the system check tests."""

from __future__ import annotations

from typing import ClassVar

from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView


class StringPolicies(APIView):
    throttle_policies = "burst"  # a bare string: a slip for ["burst"]

    def get(self, request: object) -> Response:
        return Response({})


class UnknownInList(APIView):
    throttle_scope = "single"
    throttle_policies: ClassVar[list[str]] = ["sustained", "nightly"]

    def get(self, request: object) -> Response:
        return Response({})


urlpatterns = [
    path("string/", StringPolicies.as_view()),
    path("unknown/", UnknownInList.as_view()),
]
