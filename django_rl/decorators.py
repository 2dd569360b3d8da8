"""``@ratelimit``: rate-limit a Django view with named policies.

Arguments that can be judged alone are judged when the decorator is applied:
``methods`` must be a list of HTTP method names, ``cost`` a whole number of
at least 1. What depends on the settings (a policy that does not exist, a
cost above a policy's limit) is reported by ``manage.py check``
(``django_rl.E013``, ``E014``); a cost above the limit used anyway is denied
with 429, never an error.

Async views: the decision (identity function, Redis round trip, and the 429
if one is due) runs in ``sync_to_async`` with ``thread_sensitive=True``, off
the event loop. Under Django's ASGI handler every request has its own such
thread (``ThreadSensitiveContext``), so decisions of concurrent requests run
side by side, and an identity function that reads ``request.user`` (a
session and database lookup) runs where Django runs the request's other sync
code, with the same database connection. Only the header formatting runs on
the loop. See docs/http.md for the measurements behind this choice.

DRF views (an ``APIView`` class, ``@api_view``, ``as_view()``) decide once DRF
has authenticated the request: see ``drf_views.py``.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar, cast

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponse

from django_rl.decision import Decision
from django_rl.exceptions import RateLimited
from django_rl.headers import record, recorded, write_headers
from django_rl.policies import get_policy
from django_rl.reprs import short_repr
from django_rl.responses import too_many_requests

V = TypeVar("V", bound=Callable[..., Any])

#: The methods ``methods=`` may name: RFC 9110's and PATCH (RFC 5789).
HTTP_METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}
)


@dataclass(frozen=True)
class Limit:
    """One use of ``@ratelimit``: the policies it names, a request's weight, what counts.

    :ivar methods: the methods counted (HEAD wherever GET is: Django answers
        HEAD with the GET view), or ``None`` for every method.
    """

    names: tuple[str, ...]
    cost: int = 1
    methods: frozenset[str] | None = None

    def applies(self, request: Any) -> bool:
        return self.methods is None or request.method in self.methods

    def hit(self, request: Any) -> list[Decision]:
        """Hit every policy for ``request`` (it must apply); return their Decisions.

        Every policy counts the request, even once one has denied it, the way
        DRF runs all of a view's throttles.
        """
        decisions = []
        for name in self.names:
            decision = get_policy(name).hit_request(request, self.cost)
            if decision is not None:
                decisions.append(decision)
        return decisions


def check_request(request: HttpRequest, limit: Limit) -> HttpResponse | None:
    """Hit the policies of ``limit`` for ``request``; return a 429 if any denies, else None.

    The Decisions are recorded on the request (``headers.record``), for the
    rate-limit headers of its response.
    """
    decisions = limit.hit(request)
    record(request, decisions)
    if all(decision.allowed for decision in decisions):
        return None
    return too_many_requests(request, RateLimited(decisions))


def ratelimit(
    *policies: str, methods: Iterable[str] | None = None, cost: int = 1
) -> Callable[[V], V]:
    """Limit a view by the named policies of ``DJANGO_RL["POLICIES"]``.

    Works on function views, sync or ``async def``, and on class-based views:
    decorate the class (its ``dispatch`` is wrapped once; the cheaper way) or
    use ``method_decorator(ratelimit(...), name="dispatch")`` (Django then
    applies the decorator anew on every request). A denied request
    gets 429 Too Many Requests with ``Retry-After``; the view does not run.
    Responses to counted requests, allowed or denied, carry the rate-limit
    headers ``DJANGO_RL["HEADERS"]`` asks for.

    On a DRF view (an ``APIView`` class, above or below ``@api_view``, an
    ``as_view()`` function) the policies see the user DRF authenticated, and a
    denied request gets DRF's ``Throttled`` answer, as from ``PolicyThrottle``.

    :param policies: one or more policy names; every one must allow.
    :param methods: HTTP methods that count, e.g. ``["POST"]``; others pass
        untouched. ``"GET"`` counts HEAD too. ``None`` (the default) counts
        every method.
    :param cost: the weight of one request: a whole number from 1 to the
        policy's limit.
    :raises TypeError: for a policy that is not a name, ``methods`` that is a
        string or holds one that is not, or a ``cost`` that is not an ``int``.
    :raises ValueError: for no methods, an unknown method, or a cost below 1.
    """
    if not policies or not all(isinstance(name, str) for name in policies):
        raise TypeError("ratelimit() takes one or more policy names, e.g. @ratelimit('login')")
    limit = Limit(tuple(policies), _valid_cost(cost), _counted_methods(methods))

    def decorator(view: V) -> V:
        drf = _drf()
        if isinstance(view, type):
            cls: Any = view
            if drf is not None and drf.is_api_view_class(cls):
                drf.limit_class(cls, limit)
            else:
                # dispatch() of an async class-based view is a plain method that
                # returns a coroutine: it gets the async wrapper, so the decision
                # runs off the event loop there too.
                cls.dispatch = _wrap(
                    cls.dispatch,
                    limit,
                    request_index=1,
                    is_async=bool(getattr(cls, "view_is_async", False)),
                )
            cls.django_rl_policies = getattr(cls, "django_rl_policies", ()) + limit.names
            cls.django_rl_limits = (*getattr(cls, "django_rl_limits", ()), limit)
            return view
        api_view = None if drf is None else drf.api_view_class_of(view)
        if drf is not None and api_view is not None:
            wrapper = drf.limit_function(view, api_view, limit)
        else:
            wrapper = _wrap(view, limit, request_index=0, is_async=None)
        wrapper.django_rl_policies = getattr(view, "django_rl_policies", ()) + limit.names
        wrapper.django_rl_limits = (*getattr(view, "django_rl_limits", ()), limit)
        return cast(V, wrapper)

    return decorator


def _valid_cost(cost: object) -> int:
    if type(cost) is not int:  # rules out bool and float
        raise TypeError(
            f"ratelimit(cost={short_repr(cost)}): cost must be a whole number (an int) of at "
            f"least 1, not {type(cost).__name__}"
        )
    if cost < 1:
        raise ValueError(
            f"ratelimit(cost={short_repr(cost)}): cost must be at least 1 (a request that weighs "
            "nothing would never be limited)"
        )
    return cost


def _counted_methods(methods: object) -> frozenset[str] | None:
    if methods is None:
        return None
    if isinstance(methods, (str, bytes)) or not isinstance(methods, Iterable):
        raise TypeError(
            f"ratelimit(methods={short_repr(methods)}): pass a list of HTTP methods, "
            f"e.g. methods=[{short_repr(methods)}]; a string would be read letter by letter"
            if isinstance(methods, (str, bytes))
            else f"ratelimit(methods={short_repr(methods)}): pass a list of HTTP methods, "
            "e.g. ['POST']"
        )
    given = list(methods)
    if not given:
        raise ValueError(
            "ratelimit(methods=[]) would count no request; leave methods out to count every method"
        )
    for method in given:
        if not isinstance(method, str):
            raise TypeError(
                f"ratelimit(methods=...): {short_repr(method)} is not an HTTP method name"
            )
    counted = {method.upper() for method in given}
    unknown = sorted(counted - HTTP_METHODS)
    if unknown:
        raise ValueError(
            f"ratelimit(methods=...): unknown HTTP method {', '.join(map(repr, unknown))}; "
            f"known methods are {', '.join(sorted(HTTP_METHODS))}"
        )
    if "GET" in counted:
        counted.add("HEAD")  # Django runs the GET view for HEAD: it costs the same
    return frozenset(counted)


def _drf() -> ModuleType | None:
    """Return ``django_rl.drf_views`` if DRF is loaded, else None.

    A DRF view or ``Request`` cannot exist before ``rest_framework.views`` is
    imported, so projects without DRF never import it.
    """
    if "rest_framework.views" not in sys.modules:
        return None
    from django_rl import drf_views

    return drf_views


def _wrap(
    view: Callable[..., Any],
    limit: Limit,
    *,
    request_index: int,
    is_async: bool | None,
) -> Any:
    """Return ``view`` behind the policies: a function view, or a class's ``dispatch``.

    The request is argument ``request_index`` (1 after ``self`` for
    ``dispatch``). A decorated class gets its ``dispatch`` wrapped once, here,
    rather than through ``method_decorator``, which would build the wrapper
    again on every request. A function below ``@api_view`` (or a DRF
    handler under ``method_decorator``) is called with DRF's ``Request``: it
    decides the DRF way, see ``drf_views.decide``.
    """
    if is_async is None:
        is_async = iscoroutinefunction(view)
    if is_async:

        @functools.wraps(view)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            request = args[request_index]
            if limit.applies(request):
                # Off the event loop, in the request's sync thread (see above).
                denied = await sync_to_async(check_request, thread_sensitive=True)(request, limit)
                if denied is not None:
                    return denied
            response = await view(*args, **kwargs)
            write_headers(response, recorded(request))
            return response

        return async_wrapper

    @functools.wraps(view)
    def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
        request = args[request_index]
        # DRF's Request is not an HttpRequest: one isinstance test on the usual path.
        if not isinstance(request, HttpRequest):
            drf = _drf()
            if drf is not None and drf.is_drf_request(request):
                drf.decide(request, (limit,))  # raises Throttled when denied
                return view(*args, **kwargs)
        if limit.applies(request):
            denied = check_request(request, limit)
            if denied is not None:
                return denied
        response = view(*args, **kwargs)
        write_headers(response, recorded(request))
        return response

    return sync_wrapper
