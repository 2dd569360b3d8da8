from __future__ import annotations

from django.contrib import admin
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from example_project import views

urlpatterns = [
    path("", views.home),
    path("login/", csrf_exempt(views.login)),
    path("burst/", views.BurstView.as_view()),
    path("api/items/", views.ItemsView.as_view(), name="items"),
    path("admin/", admin.site.urls),
]
