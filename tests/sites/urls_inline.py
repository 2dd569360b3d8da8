"""Routes of the inline-policy tests (``views_inline.py``)."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

from tests.sites import views_inline as views

urlpatterns = [
    path("inline/", views.inline_view),
    path("inline-async/", views.inline_async),
    path("inline-class/", views.InlineClass.as_view()),
    path("inline-async-class/", views.InlineAsyncClass.as_view()),
    path("inline-method-decorated/", views.InlineMethodDecorated.as_view()),
    path("shared-a/", views.shared_a),
    path("shared-b/", views.shared_b),
    path("shared-other-rate/", views.shared_other_rate),
    path("shared-other-key/", views.shared_other_key),
    path("any-group/", views.any_group),
    path("named-like-a-policy/", views.named_like_a_policy),
    path("soft/", views.soft),
    path("soft-async/", views.soft_async),
    path("soft-posts/", views.soft_posts),
    path("plan/", views.plan_view),
    path("too-heavy/", views.too_heavy_for_its_plan),
    path("rate-from-header/", views.rate_from_header),
    path("api/inline/", views.InlineApi.as_view()),
    path("api/soft/", views.SoftApi.as_view()),
    path("api/plan/", views.PlanThrottledApi.as_view()),
    path("admin/", admin.site.urls),
]
