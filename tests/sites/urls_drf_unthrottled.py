"""DRF views that name policies, with and without ``PolicyThrottle``, for ``django_rl.W052``."""

from __future__ import annotations

from typing import Any, ClassVar

from django.urls import path
from rest_framework import throttling as drf
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter
from rest_framework.views import APIView
from rest_framework.viewsets import ViewSet

from django_rl.contrib import drf as dropin
from django_rl.throttling import PolicyThrottle


class Base(APIView):
    def get(self, request: Any) -> Response:
        return Response({})


# -- silently unlimited: warned ------------------------------------------------


class NoThrottles(Base):
    throttle_classes: ClassVar[list[type]] = []
    throttle_scope = "burst"


class AnonOnly(Base):
    throttle_classes: ClassVar[list[type]] = [drf.AnonRateThrottle]
    throttle_policies = ("burst", "daily")


class ScopedWithPolicies(Base):
    # DRF reads the scope; nothing reads throttle_policies.
    throttle_classes: ClassVar[list[type]] = [drf.ScopedRateThrottle]
    throttle_scope = "uploads"
    throttle_policies: ClassVar[list[str]] = ["daily"]


class Inherits(Base):
    # DEFAULT_THROTTLE_CLASSES decides (PolicyThrottle in the test settings).
    throttle_scope = "burst"


# -- limited by them: not warned ------------------------------------------------


class WithPolicyThrottle(Base):
    throttle_classes: ClassVar[list[type]] = [drf.AnonRateThrottle, PolicyThrottle]
    throttle_scope = "burst"
    throttle_policies: ClassVar[list[str]] = ["daily"]


class OwnPolicyThrottle(PolicyThrottle):
    pass


class WithSubclass(Base):
    throttle_classes: ClassVar[list[type]] = [OwnPolicyThrottle]
    throttle_policies: ClassVar[list[str]] = ["burst"]


class DrfScoped(Base):
    throttle_classes: ClassVar[list[type]] = [drf.ScopedRateThrottle]
    throttle_scope = "uploads"


class DropInScoped(Base):
    throttle_classes: ClassVar[list[type]] = [dropin.AnonRateThrottle, dropin.ScopedRateThrottle]
    throttle_scope = "uploads"


class OwnThrottles(Base):
    throttle_classes: ClassVar[list[type]] = []
    throttle_scope = "burst"

    def get_throttles(self) -> list[Any]:
        return [PolicyThrottle()]


class NamesNothing(Base):
    throttle_classes: ClassVar[list[type]] = []


class Reports(ViewSet):
    throttle_classes: ClassVar[list[type]] = []
    throttle_scope = "burst"

    def list(self, request: Any) -> Response:
        return Response([])

    @action(detail=False, throttle_classes=[PolicyThrottle])
    def limited(self, request: Any) -> Response:
        return Response([])


router = SimpleRouter()
router.register("reports", Reports, basename="reports")

urlpatterns = [
    path("none/", NoThrottles.as_view()),
    path("anon/", AnonOnly.as_view()),
    path("scoped-policies/", ScopedWithPolicies.as_view()),
    path("inherits/", Inherits.as_view()),
    path("policy/", WithPolicyThrottle.as_view()),
    path("subclass/", WithSubclass.as_view()),
    path("drf-scoped/", DrfScoped.as_view()),
    path("dropin-scoped/", DropInScoped.as_view()),
    path("own/", OwnThrottles.as_view()),
    path("nothing/", NamesNothing.as_view()),
    path("given/", NoThrottles.as_view(throttle_classes=[PolicyThrottle])),
    *router.urls,
]
