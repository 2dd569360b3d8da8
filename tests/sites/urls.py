from __future__ import annotations

from django.contrib import admin
from django.urls import path

from tests.sites import views

urlpatterns = [
    path("limited/", views.limited),
    path("limited-async/", views.limited_async),
    path("writes/", views.writes_only),
    path("class/", views.LimitedClassView.as_view()),
    path("class-async/", views.LimitedAsyncClassView.as_view()),
    path("method-decorated/", views.MethodDecoratedView.as_view()),
    path("api/scoped/", views.ScopedApiView.as_view()),
    path("api/unscoped/", views.UnscopedApiView.as_view()),
    path("admin/", admin.site.urls),
]
