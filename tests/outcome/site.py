"""The views and policies of the outcome suites (``count_when``, ``costs``, ``charge``).

For each algorithm but ``concurrency`` a named policy ``login_<algorithm>``
of 5/h per client address counting failures only, behind a sync view, an
async view and a DRF view; the path's last part says what the view answers:
``ok`` (200), ``bad`` (401), ``raise`` (the view raises), ``stream`` (a
streaming 401). 5/h, so that nothing refills while a test runs.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.urls import path
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.response import Response
from rest_framework.views import APIView

from django_rl.decorators import ratelimit

ALGORITHMS = ("fixed_window", "sliding_window", "sliding_log", "token_bucket", "gcra")
LIMIT = 5
CLIENT = "198.51.100.7"
IDENTITY = f"ip:{CLIENT}"


class Boom(Exception):
    """What a view raises for ``raise``."""


def spec(algorithm: str, rate: str = f"{LIMIT}/h", **more: Any) -> dict[str, Any]:
    """Return a policy spec of ``algorithm`` at ``rate`` per client address, with ``more``."""
    found: dict[str, Any] = {"algorithm": algorithm, "rate": rate, "key": "ip", **more}
    if algorithm == "token_bucket":
        found["capacity"] = int(rate.split("/")[0])
    if algorithm == "gcra":
        found["burst"] = int(rate.split("/")[0])
    return found


def policies(**more: Any) -> dict[str, Any]:
    """Every ``login_<algorithm>`` policy (``count_when="failure"``), and ``plain_<algorithm>``."""
    found = {f"login_{a}": spec(a, count_when="failure", **more) for a in ALGORITHMS}
    found.update({f"plain_{a}": spec(a) for a in ALGORITHMS})
    return found


def answer(outcome: str) -> HttpResponse:
    if outcome == "raise":
        raise Boom("the view failed")
    if outcome == "stream":
        return StreamingHttpResponse(iter([b"no", b"pe"]), status=401)
    return HttpResponse(outcome, status=200 if outcome == "ok" else 401)


def sync_view(name: str, **arguments: Any) -> Any:
    @ratelimit(name, **arguments)
    def view(request: HttpRequest, outcome: str) -> HttpResponse:
        return answer(outcome)

    return view


def async_view(name: str, **arguments: Any) -> Any:
    @ratelimit(name, **arguments)
    async def view(request: HttpRequest, outcome: str) -> HttpResponse:
        return answer(outcome)

    return view


class LoginApi(APIView):
    """A DRF login: ``ok`` 200, ``bad`` 400, ``raise`` 403 (``AuthenticationFailed``)."""

    authentication_classes: tuple[Any, ...] = ()
    permission_classes: tuple[Any, ...] = ()

    def get(self, request: Any, outcome: str) -> Response:
        if outcome == "raise":
            raise AuthenticationFailed("wrong password")
        return Response({"outcome": outcome}, status=200 if outcome == "ok" else 400)


def api_view(algorithm: str) -> Any:
    from django_rl.throttling import PolicyThrottle

    cls = type(
        f"LoginApi_{algorithm}",
        (LoginApi,),
        {"throttle_classes": [PolicyThrottle], "throttle_scope": f"login_{algorithm}"},
    )
    return cls.as_view()


def decorated_api_view(algorithm: str) -> Any:
    """A DRF view limited by ``@ratelimit(plain_<algorithm>, count_when="failure")``."""
    cls = type(f"DecoratedLoginApi_{algorithm}", (LoginApi,), {})
    return ratelimit(f"plain_{algorithm}", count_when="failure")(cls).as_view()


urlpatterns = []
for _algorithm in ALGORITHMS:
    urlpatterns += [
        path(f"{_algorithm}/login/<str:outcome>/", sync_view(f"login_{_algorithm}")),
        path(f"{_algorithm}/alogin/<str:outcome>/", async_view(f"login_{_algorithm}")),
        path(f"{_algorithm}/api/<str:outcome>/", api_view(_algorithm)),
        path(f"{_algorithm}/dapi/<str:outcome>/", decorated_api_view(_algorithm)),
        path(
            f"{_algorithm}/success/<str:outcome>/",
            sync_view(f"plain_{_algorithm}", count_when="success"),
        ),
    ]
