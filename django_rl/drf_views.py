"""``@ratelimit`` on DRF views: the decision waits for DRF's authentication.

DRF authenticates a request in ``APIView.initial``, after ``dispatch`` has
begun: a decorator that decided around ``dispatch`` or the view function
would see Django's request, whose user is anonymous under token or Basic
authentication, so ``key: "user"`` would never apply and ``user_or_ip`` would
put every API user behind one address in one bucket. So on a DRF view the
decorator only notes its :class:`~django_rl.decorators.Limit` on the request,
and a hook around the view class's ``perform_authentication`` decides the
noted limits right after DRF has authenticated, with DRF's ``Request`` (and
its user), before permissions and throttles. Credentials DRF rejects still
count (DRF has set the anonymous user by then): a client guessing passwords
meets the limit, and once it is spent gets 429 instead of 401.

Where the decorator is called with DRF's ``Request`` itself (a function below
``@api_view``, or a handler under ``method_decorator``) it decides at once:
DRF has authenticated, or does so when the identity function reads
``request.user``.

A denied request raises DRF's ``Throttled``: the 429 with ``Retry-After`` and
``detail`` that ``PolicyThrottle`` gives, through the project's exception
handler (with ``block=False`` the view runs, ``request.limited`` set). The
rate-limit headers go into the view's ``headers``, which
``finalize_response`` copies onto every response, allowed or denied. Slots
of ``concurrency`` policies are given back when the request is done
(``throttling.hold_until_done``, ``slots.py``).

This module imports DRF; ``decorators.py`` loads it only once DRF is loaded.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rest_framework.exceptions import APIException, Throttled
from rest_framework.request import Request
from rest_framework.views import APIView

import django_rl.leases as leases
from django_rl.http import settlement
from django_rl.policies import engine
from django_rl.throttling import hold_until_done, settle_when_done, write_view_headers

if TYPE_CHECKING:
    from django_rl.policies.engine import Limit

#: The attribute of Django's ``HttpRequest`` that holds the limits noted for it.
NOTED = "_django_rl_noted_limits"
#: Marks a ``perform_authentication`` that decides the noted limits.
_HOOK = "_django_rl_decides"
_hooking = threading.Lock()


def is_api_view_class(obj: object) -> bool:
    return isinstance(obj, type) and issubclass(obj, APIView)


def is_drf_request(obj: object) -> bool:
    return isinstance(obj, Request)


def api_view_class_of(view: object) -> type[APIView] | None:
    """Return the ``APIView`` class that ``view`` runs, or None for another view.

    ``view`` is a function made by ``as_view()`` or ``@api_view`` (DRF puts
    the class in its ``cls``), or what ``method_decorator`` hands a decorator
    on each request: a ``partial`` of a method bound to the view instance.
    """
    cls = getattr(view, "cls", None)
    if is_api_view_class(cls):
        return cls
    if isinstance(view, functools.partial):
        owner = getattr(view.func, "__self__", None)
        if isinstance(owner, APIView):
            return type(owner)
    return None


def limit_class(cls: type[APIView], limit: Limit) -> None:
    """Limit every request of the ``APIView`` class ``cls`` (and its subclasses)."""
    hook(cls)
    cls.dispatch = _noting(cls.dispatch, limit, request_index=1)  # type: ignore[method-assign]


def limit_function(
    view: Callable[..., Any], cls: type[APIView], limit: Limit
) -> Callable[..., Any]:
    """Return ``view`` (which runs ``cls``) limited; ``cls`` decides only for its requests.

    The class is hooked, not limited: a class used by several ``as_view()``
    views is limited only where the decorator is.
    """
    hook(cls)
    noting: Callable[..., Any] = _noting(view, limit, request_index=0)
    return noting


def _noting(view: Callable[..., Any], limit: Limit, *, request_index: int) -> Any:
    """Return ``view``, noting ``limit`` on each request; or deciding, given DRF's Request."""

    @functools.wraps(view)
    def noting(*args: Any, **kwargs: Any) -> Any:
        request = args[request_index]
        if isinstance(request, Request):
            decide(request, (limit,))
        else:
            if request_index == 1:
                # A subclass may override perform_authentication without
                # calling super(): its own needs the hook (once; then a getattr).
                hook(type(args[0]))
            engine.not_limited(request)  # the view reads it even if no limit applies
            setattr(request, NOTED, (*getattr(request, NOTED, ()), limit))
        return view(*args, **kwargs)

    return noting


def hook(cls: type[APIView]) -> None:
    """Make ``cls.perform_authentication`` decide the limits noted on the request.

    Idempotent and thread-safe: a method already hooked, here or in a base
    class, is left alone, so no limit is decided twice (they are taken off
    the request when decided, too).
    """
    if getattr(cls.perform_authentication, _HOOK, False):
        return
    with _hooking:
        current = cls.perform_authentication
        if not getattr(current, _HOOK, False):
            cls.perform_authentication = _hooked(current)  # type: ignore[method-assign]


def _hooked(perform_authentication: Callable[[Any, Request], None]) -> Any:
    @functools.wraps(perform_authentication)
    def hooked(self: APIView, request: Request) -> None:
        try:
            perform_authentication(self, request)
        except APIException:
            # Credentials DRF rejected (it has set the anonymous user): count
            # the attempt; a Throttled raised here replaces the 401.
            _decide_noted(request)
            raise
        _decide_noted(request)

    setattr(hooked, _HOOK, True)
    return hooked


def _decide_noted(request: Request) -> None:
    limits = request._request.__dict__.pop(NOTED, ())
    if limits:
        decide(request, limits)


def decide(request: Request, limits: Sequence[Limit]) -> None:
    """Decide the ``limits`` that apply to ``request``; raise ``Throttled`` if one blocks.

    The Decisions are recorded on the request (and ``request.limited`` set,
    by ``engine.decide``) and put in the view's ``headers`` (from the
    request's ``parser_context``), the way ``PolicyThrottle`` reports its own.
    """
    verdict = engine.decide(request, limits)
    if not verdict.decisions:
        return
    view = request.parser_context.get("view")
    write_view_headers(view, verdict.every)
    held = verdict.held
    if verdict.blocking:
        leases.release(held)  # another use of @ratelimit refused the request
        raise Throttled(wait=max(d.retry_after_header for d in verdict.blocking))
    hold_until_done(view, held, request)
    if settlement.owes(request):
        settle_when_done(view, request)
