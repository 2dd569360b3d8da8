"""DRF views under ``@ratelimit``, one per place the decorator can go.

Every view authenticates with HTTP Basic only (no session), so the user is
known only once DRF has authenticated the request: exactly what the
decorator must wait for. The views answer with the user they saw.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.utils.decorators import method_decorator
from rest_framework.authentication import BasicAuthentication
from rest_framework.decorators import api_view, authentication_classes
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.viewsets import ViewSet

from django_rl.decorators import ratelimit


def whoami(request: Any) -> Response:
    return Response({"user": request.user.username or None})


class BasicApi(APIView):
    """Not decorated: the base of the others, and a route of its own."""

    authentication_classes: ClassVar[list[type]] = [BasicAuthentication]

    def get(self, request: Any) -> Response:
        return whoami(request)

    def post(self, request: Any) -> Response:
        return whoami(request)


@ratelimit("per_user")
class UserLimitedApi(BasicApi):
    pass


@ratelimit("per_user_or_ip")
class UserOrIpLimitedApi(BasicApi):
    pass


@ratelimit("per_ip")
class IpLimitedApi(BasicApi):
    permission_classes: ClassVar[list[type]] = [IsAuthenticated]


@ratelimit("per_user", methods=["POST"])
class PostsLimitedApi(BasicApi):
    pass


@ratelimit("per_user")
class ChildApi(UserLimitedApi):
    """Decorated again below a decorated class: both uses count, each once."""


@method_decorator(ratelimit("per_user"), name="dispatch")
class MethodDecoratedApi(BasicApi):
    pass


@ratelimit("per_user")
@api_view(["GET"])
@authentication_classes([BasicAuthentication])
def above_api_view(request: Any) -> Response:
    return whoami(request)


@api_view(["GET"])
@authentication_classes([BasicAuthentication])
@ratelimit("per_user")
def below_api_view(request: Any) -> Response:
    return whoami(request)


@ratelimit("per_user")
class LimitedViewSet(ViewSet):
    authentication_classes: ClassVar[list[type]] = [BasicAuthentication]

    def list(self, request: Any) -> Response:
        return whoami(request)
