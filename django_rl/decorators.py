"""``@ratelimit``: rate-limit a Django view with named policies.

Async views: the decision (identity function, Redis round trip, and the 429
if one is due) runs in ``sync_to_async`` with ``thread_sensitive=True``, off
the event loop. Under Django's ASGI handler every request has its own such
thread (``ThreadSensitiveContext``), so decisions of concurrent requests run
side by side, and an identity function that reads ``request.user`` (a
session and database lookup) runs where Django runs the request's other sync
code, with the same database connection. Only the header formatting runs on
the loop. See docs/http.md for the measurements behind this choice.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import method_decorator

from django_rl.exceptions import RateLimited
from django_rl.headers import record, recorded, write_headers
from django_rl.policies import get_policy
from django_rl.responses import too_many_requests

V = TypeVar("V", bound=Callable[..., Any])


def check_request(
    request: HttpRequest, policies: Iterable[str], cost: int = 1
) -> HttpResponse | None:
    """Hit every named policy for ``request``; return a 429 if any denies, else None.

    Every policy counts the request, even once one has denied it, the way DRF
    runs all of a view's throttles. The Decisions are recorded on the request
    (``headers.record``), for the rate-limit headers of its response.
    """
    decisions = []
    for name in policies:
        decision = get_policy(name).hit_request(request, cost)
        if decision is not None:
            decisions.append(decision)
    record(request, decisions)
    if all(decision.allowed for decision in decisions):
        return None
    return too_many_requests(request, RateLimited(decisions))


def ratelimit(
    *policies: str, methods: Iterable[str] | None = None, cost: int = 1
) -> Callable[[V], V]:
    """Limit a view by the named policies of ``DJANGO_RL["POLICIES"]``.

    Works on function views, sync or ``async def``, and on class-based views:
    decorate the class (its ``dispatch`` is wrapped) or use
    ``method_decorator(ratelimit(...), name="dispatch")``. A denied request
    gets 429 Too Many Requests with ``Retry-After``; the view does not run.
    Responses to counted requests, allowed or denied, carry the rate-limit
    headers ``DJANGO_RL["HEADERS"]`` asks for.

    :param policies: one or more policy names; every one must allow.
    :param methods: HTTP methods that count, e.g. ``["POST"]``; others pass
        untouched. ``None`` (the default) counts every method.
    :param cost: the weight of one request (1 to the policy's limit).
    """
    if not policies or not all(isinstance(name, str) for name in policies):
        raise TypeError("ratelimit() takes one or more policy names, e.g. @ratelimit('login')")
    names = tuple(policies)
    counted = None if methods is None else frozenset(m.upper() for m in methods)

    def applies(request: HttpRequest) -> bool:
        return counted is None or request.method in counted

    def decorator(view: V) -> V:
        if isinstance(view, type):
            return cast(V, _decorate_class(view, decorator, names))
        if iscoroutinefunction(view):

            @functools.wraps(view)
            async def async_wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                if applies(request):
                    # Off the event loop, in the request's sync thread (see above).
                    denied = await sync_to_async(check_request, thread_sensitive=True)(
                        request, names, cost
                    )
                    if denied is not None:
                        return denied
                response = await view(request, *args, **kwargs)
                write_headers(response, recorded(request))
                return response

            wrapper: Any = async_wrapper
        else:

            @functools.wraps(view)
            def sync_wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                if applies(request):
                    denied = check_request(request, names, cost)
                    if denied is not None:
                        return denied
                response = view(request, *args, **kwargs)
                write_headers(response, recorded(request))
                return response

            wrapper = sync_wrapper
        wrapper.django_rl_policies = names
        return cast(V, wrapper)

    return decorator


def _decorate_class(cls: Any, decorator: Callable[[Any], Any], names: tuple[str, ...]) -> Any:
    """Wrap a class-based view's ``dispatch`` (async views get an async wrapper)."""
    if getattr(cls, "view_is_async", False):
        # dispatch() of an async view is a plain method that returns a
        # coroutine; wrap it in a coroutine function so the decision runs off
        # the event loop too.
        dispatch = cls.dispatch

        async def async_dispatch(self: Any, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            return await dispatch(self, request, *args, **kwargs)

        functools.update_wrapper(async_dispatch, dispatch)
        cls.dispatch = async_dispatch
    decorated = method_decorator(decorator, name="dispatch")(cls)
    decorated.django_rl_policies = getattr(cls, "django_rl_policies", ()) + names
    return decorated
