"""DRF views throttled by the drop-in, routed: what the admin's process finds without a request."""

from __future__ import annotations

from django.urls import path

from tests.sites import views_contrib_drf as views

urlpatterns = [
    path("double/", views.DoubleView.as_view()),
    path("x/", views.XView.as_view()),
    path("y/", views.YView.as_view()),
    path("free/", views.FreeView.as_view()),
    path("unscoped/", views.UnscopedView.as_view()),
    path("tenant/", views.TenantView.as_view()),
]
