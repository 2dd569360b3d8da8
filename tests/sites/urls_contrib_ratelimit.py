"""URLs of the django-ratelimit drop-in's tests."""

from __future__ import annotations

from django.urls import path

from tests.sites import views_contrib_ratelimit as views

urlpatterns = [
    path("blocked/", views.blocked),
    path("annotated/", views.annotated),
    path("get-only/", views.get_only),
    path("class/", views.ClassView.as_view()),
]
