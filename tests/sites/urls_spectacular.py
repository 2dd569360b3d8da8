"""The views of views_spectacular.py, and the schema (test_openapi.py)."""

from __future__ import annotations

from django.urls import path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.routers import SimpleRouter

from django_rl.decorators import ratelimit
from tests.sites import views_spectacular as views

router = SimpleRouter()
router.register("things", views.Things, basename="things")

urlpatterns = [
    path("plain/", views.Plain.as_view()),
    path("throttled/", views.Throttled.as_view()),
    path("unnamed/", views.Unnamed.as_view()),
    path("own-throttles/", views.OwnThrottles.as_view()),
    path("dropin/", views.DropIn.as_view()),
    path("scoped/", views.Scoped.as_view()),
    path("drf-own/", views.DrfOwn.as_view()),
    path("posts-only/", views.PostsOnly.as_view()),
    path("inline/", views.Inline.as_view()),
    path("handler/", views.HandlerDecorated.as_view()),
    path("as-view/<int:pk>/", ratelimit("daily")(views.Plain.as_view())),
    path("above/", views.above),
    path("below/", views.below),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    *router.urls,
]
