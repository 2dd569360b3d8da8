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
    decorate the class (its ``dispatch`` is wrapped once; the cheaper way) or
    use ``method_decorator(ratelimit(...), name="dispatch")`` (Django then
    applies the decorator anew on every request). A denied request
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
            cls: Any = view
            # dispatch() of an async class-based view is a plain method that
            # returns a coroutine: it gets the async wrapper, so the decision
            # runs off the event loop there too.
            cls.dispatch = _wrap(
                cls.dispatch,
                applies,
                names,
                cost,
                request_index=1,
                is_async=bool(getattr(cls, "view_is_async", False)),
            )
            cls.django_rl_policies = getattr(cls, "django_rl_policies", ()) + names
            return view
        wrapper = _wrap(view, applies, names, cost, request_index=0, is_async=None)
        wrapper.django_rl_policies = names
        return cast(V, wrapper)

    return decorator


def _wrap(
    view: Callable[..., Any],
    applies: Callable[[HttpRequest], bool],
    names: tuple[str, ...],
    cost: int,
    *,
    request_index: int,
    is_async: bool | None,
) -> Any:
    """Return ``view`` behind the policies: a function view, or a class's ``dispatch``.

    The request is argument ``request_index`` (1 after ``self`` for
    ``dispatch``). A decorated class gets its ``dispatch`` wrapped once, here,
    rather than through ``method_decorator``, which would build the wrapper
    again on every request.
    """
    if is_async is None:
        is_async = iscoroutinefunction(view)
    if is_async:

        @functools.wraps(view)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            request = args[request_index]
            if applies(request):
                # Off the event loop, in the request's sync thread (see above).
                denied = await sync_to_async(check_request, thread_sensitive=True)(
                    request, names, cost
                )
                if denied is not None:
                    return denied
            response = await view(*args, **kwargs)
            write_headers(response, recorded(request))
            return response

        return async_wrapper

    @functools.wraps(view)
    def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
        request = args[request_index]
        if applies(request):
            denied = check_request(request, names, cost)
            if denied is not None:
                return denied
        response = view(*args, **kwargs)
        write_headers(response, recorded(request))
        return response

    return sync_wrapper
