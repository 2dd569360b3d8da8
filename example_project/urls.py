from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from django_rl.observability.metrics import metrics_view
from django_rl.views import rate_limit_status
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
    # A client's standing on every policy, as JSON; never counted.
    path("rate_limit/", rate_limit_status, name="rate_limit_status"),
    path("admin/", admin.site.urls),
]

if settings.SPECTACULAR:
    from drf_spectacular.views import SpectacularAPIView

    urlpatterns.append(path("api/schema/", SpectacularAPIView.as_view(), name="schema"))
