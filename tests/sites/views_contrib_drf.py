"""DRF views throttled by the DRF drop-in (``django_rl.contrib.drf``), as a project writes them."""

from __future__ import annotations

from typing import Any, ClassVar

from rest_framework.response import Response
from rest_framework.views import APIView

from django_rl.contrib.drf import (
    AnonRateThrottle,
    ScopedRateThrottle,
    SimpleRateThrottle,
    UserRateThrottle,
)


class User3SecRateThrottle(UserRateThrottle):
    rate = "3/sec"
    scope = "seconds"


class User6MinRateThrottle(UserRateThrottle):
    rate = "6/min"
    scope = "minutes"


class User3MinRateThrottle(UserRateThrottle):
    rate = "3/min"
    scope = "minutes3"


class TwoPerTwoSeconds(AnonRateThrottle):
    """2 per 2 s by address: short enough to watch ``wait()`` fall on the Redis clock."""

    rate = "2/2s"
    scope = "two"


class XYScopedRateThrottle(ScopedRateThrottle):
    THROTTLE_RATES: ClassVar[dict[str, Any]] = {"x": "3/min", "y": "1/min", "free": None}


class PerTenant(SimpleRateThrottle):
    """A custom identity: every request of one tenant (a header) shares the count."""

    scope = "tenant"
    rate = "2/min"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        tenant = request.META.get("HTTP_X_TENANT")
        if tenant is None:
            return None  # not throttled
        return self.cache_format % {"scope": self.scope, "ident": tenant}


class Api(APIView):
    authentication_classes: ClassVar[list[type]] = []
    permission_classes: ClassVar[list[type]] = []

    def get(self, request: Any) -> Response:
        return Response("ok")


class AnonView(Api):
    throttle_classes: ClassVar[list[type]] = [AnonRateThrottle]


class UserView(Api):
    throttle_classes: ClassVar[list[type]] = [UserRateThrottle]


class SecondsView(Api):
    throttle_classes: ClassVar[list[type]] = [User3SecRateThrottle]


class MinuteView(Api):
    throttle_classes: ClassVar[list[type]] = [User3MinRateThrottle]


class DoubleView(Api):
    throttle_classes: ClassVar[list[type]] = [User3SecRateThrottle, User6MinRateThrottle]


class TwoView(Api):
    throttle_classes: ClassVar[list[type]] = [TwoPerTwoSeconds]


class XView(Api):
    throttle_classes: ClassVar[list[type]] = [XYScopedRateThrottle]
    throttle_scope = "x"


class YView(Api):
    throttle_classes: ClassVar[list[type]] = [XYScopedRateThrottle]
    throttle_scope = "y"


class FreeView(Api):
    throttle_classes: ClassVar[list[type]] = [XYScopedRateThrottle]
    throttle_scope = "free"


class UnscopedView(Api):
    throttle_classes: ClassVar[list[type]] = [XYScopedRateThrottle]


class SettingsScopedView(Api):
    throttle_classes: ClassVar[list[type]] = [ScopedRateThrottle]
    throttle_scope = "uploads"


class TenantView(Api):
    throttle_classes: ClassVar[list[type]] = [PerTenant]
