from __future__ import annotations

from django.contrib import admin
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from django_rl.observability.metrics import metrics_view
from example_project import views

urlpatterns = [
    path("", views.home),
    path("login/", csrf_exempt(views.login)),
    path("burst/", views.BurstView.as_view()),
    path("api/items/", views.ItemsView.as_view(), name="items"),
    path("search/", views.search, name="search"),
    # Public here for the demo; on a real site keep it from the public (a
    # network rule, or authentication around it).
    path("metrics/", metrics_view, name="metrics"),
    path("admin/", admin.site.urls),
]
