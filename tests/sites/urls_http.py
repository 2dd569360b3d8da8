from __future__ import annotations

from django.urls import path

from tests.sites import views_http as views

urlpatterns = [
    path("single/", views.single),
    path("several/", views.several),
    path("single-async/", views.single_async),
    path("missing/", views.missing),
    path("plain-async/", views.plain_async),
    path("raises/", views.raises),
    path("recorded/", views.recorded),
    path("api/single/", views.SingleApi.as_view()),
    path("api/several/", views.SeveralApi.as_view()),
    path("api/policies-only/", views.PoliciesOnlyApi.as_view()),
    path("api/raises/", views.RaisingApi.as_view()),
]
