"""``@ratelimit``: rate-limit a Django view with named policies, or one of its own.

Arguments that can be judged alone are judged when the decorator is applied:
``methods`` must be a list of HTTP method names, ``cost`` a whole number of
at least 1, an inline policy's rate, algorithm and key well formed (a cost
above an inline rate's limit is refused too). What depends on the settings
(a policy that does not exist, a cost above a named policy's limit, a dotted
path that does not import) is reported by ``manage.py check``
(``django_rl.E013``, ``E014``, ``E007``, ``E011``); a cost above the limit
used anyway is denied with 429, never an error.

Async views (and a class whose ``dispatch`` is async) decide on the event
loop: the same steps (``Limit.adecide``), the round trip awaited on a
``redis.asyncio`` connection, the 429 and the headers made on the loop, no
thread. Only the project's own sync callables hop: a key or rate function
runs in ``sync_to_async`` (thread-sensitive: where Django runs the request's
other sync code, with its database connection); an ``async def`` one is
awaited. The ``user`` keys read ``await request.auser()`` where Django has
it. An async view served by WSGI (a new event loop per request) decides on
the sync path in the request's thread instead (:func:`_acheck`). See
docs/http.md.

DRF views (an ``APIView`` class, ``@api_view``, ``as_view()``) decide once DRF
has authenticated the request: see ``drf_views.py``. The deciding itself is
``engine.py``'s, shared with ``PolicyThrottle``.
"""

from __future__ import annotations

import difflib
import functools
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import ModuleType
from typing import Any, NoReturn, TypeVar, cast

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse

import django_rl.leases as leases
from django_rl.core.rates import parse_rate
from django_rl.core.recording import recorded
from django_rl.core.reprs import short_repr
from django_rl.exceptions import RateLimited
from django_rl.http import settlement, slots
from django_rl.http.headers import write_headers
from django_rl.http.responses import too_many_requests
from django_rl.leases import Lease
from django_rl.policies import engine, inline
from django_rl.policies.charging import HTTP_METHODS, Charging, judge_charging, judge_cost
from django_rl.policies.engine import Limit, Verdict
from django_rl.policies.plans import is_rate_function

V = TypeVar("V", bound=Callable[..., Any])

__all__ = ["HTTP_METHODS", "ratelimit"]


#: The attribute of a decorated view (or ``dispatch``) that lists its limits.
LIMITS_ATTRIBUTE = "_django_rl_limits"


def _check(request: HttpRequest, limit: Limit) -> tuple[HttpResponse | None, Verdict]:
    """Decide ``limit`` for ``request``: a 429 if it blocks a denial, and the Verdict.

    The slots the Verdict holds (``concurrency`` policies' leases) are held by
    the request (``http/slots.py``) as soon as taken, so that a request
    cancelled while this runs in a thread gives them back; the caller hands
    them to the view's response. A request refused takes none: all or
    nothing, no policy counted it.
    """
    verdict = limit.decide(request)  # the engine's one path
    if verdict.blocking:
        return _refused(request, verdict), verdict
    if verdict.held:
        slots.hold(request, verdict.held)
    return None, verdict


async def _acheck(request: HttpRequest, limit: Limit) -> tuple[HttpResponse | None, Verdict]:
    """:func:`_check` on the event loop (``Limit.adecide``; slots given back awaited).

    Only for a request an ASGI server serves. An async view served by WSGI
    (or Django's sync test ``Client``) runs on an event loop made for that
    one request (``async_to_sync``): a connection opened on it could not
    outlive the request, so each decision would cost a new TCP connection.
    Its decision takes the sync path in a thread, on the kept connections.
    """
    if not isinstance(request, ASGIRequest):
        return await sync_to_async(_check, thread_sensitive=True)(request, limit)
    verdict = await limit.adecide(request)
    if verdict.blocking:
        await leases.arelease(verdict.held)
        return _too_many(request, verdict), verdict
    if verdict.held:
        slots.hold(request, verdict.held)
    return None, verdict


def _refused(request: HttpRequest, verdict: Verdict) -> HttpResponse:
    """Return the 429 for a Verdict that blocks; give back the slots it took (none count)."""
    leases.release(verdict.held)
    return _too_many(request, verdict)


def _too_many(request: HttpRequest, verdict: Verdict) -> HttpResponse:
    """Return the 429 for a Verdict that blocks."""
    return too_many_requests(request, RateLimited(list(verdict.decisions)))


def ratelimit(
    *policies: str,
    rate: Any = None,
    key: Any = None,
    algorithm: str | None = None,
    group: str | None = None,
    methods: Iterable[str] | None = None,
    cost: int | Callable[[HttpRequest], int] = 1,
    block: bool = True,
    costs: Mapping[str, int] | None = None,
    count_when: str | Callable[[HttpRequest, HttpResponse], bool] | None = None,
    charge: str | Callable[[HttpRequest, HttpResponse], int] | None = None,
    **unexpected: NoReturn,
) -> Callable[[V], V]:
    """Limit a view by named policies of ``DJANGO_RL["POLICIES"]``, or by a policy of its own.

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

    :param policies: policy names; every one must allow.
    :param rate: an inline policy: ``"5/m"``, or a function of the request
        (or its dotted path) that returns a rate or ``None`` (per-plan rates).
    :param key: the inline policy's identity (as a policy's ``key``, or a
        callable); default ``"user_or_ip"``.
    :param algorithm: the inline policy's algorithm; default ``"fixed_window"``.
    :param group: names the inline policy's state: uses with the same group,
        algorithm, rate and key share it. Default: the view's dotted name.
    :param methods: HTTP methods that count, e.g. ``["POST"]``; others pass
        untouched. ``"GET"`` counts HEAD too. ``None`` (the default) counts
        every method.
    :param cost: the weight of one request: a whole number from 1 to the
        policy's limit, or a callable ``(request) -> int`` asked per request.
    :param costs: the weight per HTTP method, e.g. ``{"GET": 1, "POST": 5}``
        (other methods cost ``cost``), over each policy's own ``costs``.
    :param count_when: ``"always"`` (the default), ``"failure"`` (status >= 400,
        or the view raised), ``"success"`` (status < 400), or a callable
        ``(request, response) -> bool`` (or its dotted path): the hit is
        counted before the view and given back after the response when this
        says it does not count. Over each policy's own ``count_when``.
    :param charge: a callable ``(request, response) -> int`` (or its dotted
        path): points counted after the response on top of the cost (as
        ``penalize``). Over each policy's own ``charge``.
    :param block: ``False`` runs the view even when a policy denies, with
        ``request.limited`` set (its headers still go out).
    :raises TypeError: for a policy that is not a name, neither a name nor
        ``rate``, ``key``/``algorithm``/``group`` without ``rate``, ``methods``
        that is a string or holds one that is not, or a ``cost`` or ``block``
        of the wrong type.
    :raises ValueError: for no methods, an unknown method, or a cost below 1
        (or above an inline rate's limit).
    :raises ConfigurationError: for an inline rate, algorithm or key that is
        malformed (the message names it).

    An unknown keyword argument is a ``TypeError`` that names the argument
    meant, if one is close: django-ratelimit's ``method=`` is ``methods=``
    here. (``**unexpected`` is typed ``NoReturn``: type checkers still refuse it.)
    """
    if unexpected:
        raise TypeError(_unexpected_message(unexpected))
    if rate is None and (key, algorithm, group) != (None, None, None):
        raise TypeError(
            "ratelimit(): key, algorithm and group describe an inline policy: give rate="
        )
    if (not policies and rate is None) or not all(isinstance(n, str) for n in policies):
        raise TypeError(
            "ratelimit() takes one or more policy names, e.g. @ratelimit('login'), "
            "or a rate of its own, e.g. @ratelimit(rate='5/m')"
        )
    if not isinstance(block, bool):
        raise TypeError(f"ratelimit(block={block!r}): block must be True or False")
    cost = judge_cost(cost)
    charging: Charging = judge_charging(count_when=count_when, costs=costs, charge=charge)
    counted = _counted_methods(methods)
    if rate is not None:
        algorithm = inline.DEFAULT_ALGORITHM if algorithm is None else algorithm
        key = inline.DEFAULT_KEY if key is None else key
        inline.judge(rate=rate, key=key, algorithm=algorithm, group=group)
        _inline_cost(rate, cost)
        for method_cost in (charging.costs or {}).values():
            _inline_cost(rate, method_cost)

    def decorator(view: V) -> V:
        spec = None
        if rate is not None:
            # method_decorator's stand-in gets a group of its own; url_specs()
            # gives it the view class's name, as each request's decoration does.
            group_of_view = group or inline.view_name(view)
            spec = inline.InlineSpec(group_of_view, str(algorithm), rate, key)
        limit = Limit(tuple(policies), cost, counted, spec, block, charging)
        drf = _drf()
        if isinstance(view, type):
            cls: Any = view
            if drf is not None and drf.is_api_view_class(cls):
                drf.limit_class(cls, limit)
            else:
                # dispatch() of an async class-based view is a plain method that
                # returns a coroutine: it gets the async wrapper, so the decision
                # runs on the event loop there too.
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


#: The keyword arguments ``ratelimit`` takes, for the message of one it does not.
_KEYWORDS = (
    "rate", "key", "algorithm", "group", "methods", "cost", "block", "costs", "count_when",
    "charge",
)  # fmt: skip


def _unexpected_message(unexpected: Mapping[str, object]) -> str:
    """Return Python's message for an unknown keyword argument, with the one probably meant."""
    name = sorted(unexpected)[0]
    message = f"ratelimit() got an unexpected keyword argument {name!r}"
    close = difflib.get_close_matches(name.lower(), _KEYWORDS, n=1, cutoff=0.6)
    if close:
        return f"{message}; did you mean {close[0]}=?"
    return f"{message}; it takes {', '.join(k + '=' for k in _KEYWORDS)}"


def _inline_cost(rate: object, cost: object) -> None:
    """Refuse a cost above an inline rate's limit: it is known now, and never allowed."""
    if is_rate_function(rate) or type(cost) is not int:
        return  # known per request: above it, the request is denied (429)
    limit = parse_rate(rate).limit
    if 1 <= limit < cost:
        raise ValueError(
            f"ratelimit(rate={short_repr(rate)}, cost={short_repr(cost)}): the cost is above "
            f"the limit {limit}, "
            "so every request would be denied"
        )


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
    import django_rl.drf_views as drf_views

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
            held: Sequence[Lease] = ()
            if limit.applies(request):
                # On the event loop (see above).
                try:
                    denied, verdict = await _acheck(request, limit)
                except BaseException:
                    # Cancelled (the client left) while deciding: slots taken
                    # are given back (and any taken later, at once).
                    slots.end(request)
                    raise
                if denied is not None:
                    return denied
                held = verdict.held
            else:
                engine.not_limited(request)
            if not held and not (settlement.SETTLING.on and settlement.owes(request)):
                response = await view(*args, **kwargs)
                write_headers(response, recorded(request))
                return response
            try:
                response = await view(*args, **kwargs)
            except BaseException:
                await leases.arelease(held)
                await settlement.asettle_raised(request)
                raise
            # count_when's give-backs and charge (policies/settling.py).
            await settlement.asettle_after(request, response)
            if held:
                # Given back when the ASGI handler closes the response (after its
                # body), or the one it sent instead (http/slots.py).
                slots.give_back_when_closed(response, slots.attached(request))
            write_headers(response, recorded(request))
            return response

        async_wrapper._django_rl_limits = (*_limits_of(view), limit)  # type: ignore[attr-defined]
        return async_wrapper

    @functools.wraps(view)
    def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
        request = args[request_index]
        # DRF's Request is not an HttpRequest: one isinstance test on the usual path.
        if not isinstance(request, HttpRequest):
            drf = _drf()
            if drf is not None and drf.is_drf_request(request):
                drf.decide(request, (limit,))  # raises Throttled when it blocks a denial
                return view(*args, **kwargs)
        # _check, inline: this runs on every decision.
        verdict = limit.decide(request)  # the engine's one path
        if verdict.blocking:
            return _refused(request, verdict)
        if verdict.held or (settlement.SETTLING.on and settlement.owes(request)):
            slots.hold(request, verdict.held)
            return _holding(view, args, kwargs, request, slots.attached(request), verdict.held)
        response = view(*args, **kwargs)
        write_headers(response, verdict.every)  # (the request's list: the view's own too)
        return response

    # The view's limits, for RateLimitMiddleware's RULES (decided together).
    sync_wrapper._django_rl_limits = (*_limits_of(view), limit)  # type: ignore[attr-defined]
    return sync_wrapper


def _limits_of(view: Callable[..., Any]) -> tuple[Limit, ...]:
    """Return the limits of the ``@ratelimit`` uses below this one (stacked), innermost first."""
    found: tuple[Limit, ...] = getattr(view, LIMITS_ATTRIBUTE, ())
    return found


def _holding(
    view: Callable[..., Any],
    args: Any,
    kwargs: Any,
    request: HttpRequest,
    held_by: slots.Slots,
    held: Sequence[Lease],
) -> Any:
    """Run ``view`` while ``held_by`` (the request's slots) holds ``held``, until it is done.

    Django closes every response once its body is sent (a streaming one once
    the last chunk is): the view's, or the one a middleware sent instead, or
    it gives up the request (http/slots.py). If the view raises, the slots
    are given back at once. What ``count_when`` gives back and ``charge``
    counts is settled after the view (``http/settlement.py``).
    """
    try:
        response = view(*args, **kwargs)
    except BaseException:
        leases.release(held)
        settlement.settle_raised(request)
        raise
    if held:
        slots.give_back_when_closed(response, held_by)
    settlement.settle_after(request, response)
    write_headers(response, recorded(request))
    return response
