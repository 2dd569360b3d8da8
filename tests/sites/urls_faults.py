"""The views the fault-injection suite sends traffic to: one per algorithm and front door."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView

from django_rl.decorators import ratelimit
from tests.sites import views


@ratelimit("log")
def log_view(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit("bucket")
def bucket_view(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


class LogApiView(APIView):
    throttle_scope = "log"

    def get(self, request: object) -> Response:
        return Response({"ok": True})


class BucketApiView(APIView):
    throttle_scope = "bucket"

    def get(self, request: object) -> Response:
        return Response({"ok": True})


urlpatterns = [
    path("window/", views.limited),  # @ratelimit("per_minute"): fixed_window
    path("window-async/", views.limited_async),
    path("window-class/", views.LimitedClassView.as_view()),
    path("api/window/", views.ScopedApiView.as_view()),  # DRF, throttle_scope "per_minute"
    path("log/", log_view),
    path("api/log/", LogApiView.as_view()),
    path("bucket/", bucket_view),
    path("api/bucket/", BucketApiView.as_view()),
]
