"""The example project's URLs, and an unlimited twin of each limited view."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.views import View

from example_project import views
from example_project.urls import urlpatterns as example_urlpatterns


class OpenItemsView(views.ItemsView):
    """``ItemsView`` (DRF, PolicyThrottle on the ``api`` policy) with no throttle."""

    throttle_classes = ()


class OpenBurstView(View):
    """``BurstView`` (``@ratelimit("burst")``) without the decorator."""

    def get(self, request: HttpRequest) -> HttpResponse:
        return JsonResponse({"ok": True})


urlpatterns = [
    *example_urlpatterns,
    path("open/api/items/", OpenItemsView.as_view()),
    path("open/burst/", OpenBurstView.as_view()),
]
