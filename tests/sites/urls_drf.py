"""DRF views decorated with ``@ratelimit`` (see ``views_drf.py``)."""

from __future__ import annotations

from django.urls import path

from django_rl.decorators import ratelimit
from tests.sites import views_drf as views

urlpatterns = [
    path("class/", views.UserLimitedApi.as_view()),
    path("user-or-ip/", views.UserOrIpLimitedApi.as_view()),
    path("ip/", views.IpLimitedApi.as_view()),
    path("posts/", views.PostsLimitedApi.as_view()),
    path("child/", views.ChildApi.as_view()),
    path("method-decorated/", views.MethodDecoratedApi.as_view()),
    path("above-api-view/", views.above_api_view),
    path("below-api-view/", views.below_api_view),
    path("as-view/", ratelimit("per_user")(views.BasicApi.as_view())),
    path("plain/", views.BasicApi.as_view()),
    path("viewset/", views.LimitedViewSet.as_view({"get": "list"})),
]
