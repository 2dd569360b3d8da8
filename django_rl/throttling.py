"""DRF throttling through the policy registry.

Add ``django_rl.throttling.PolicyThrottle`` to ``DEFAULT_THROTTLE_CLASSES`` (or
a view's ``throttle_classes``) and name the policy in the view's
``throttle_scope``, DRF's own convention, and any more in
``throttle_policies``. A view with neither is not limited unless
``DJANGO_RL["DEFAULT_POLICY"]`` names a policy. Denied requests get DRF's own
``Throttled`` error: 429 with ``Retry-After`` and ``wait``.

The throttle only decides. It records its Decisions on the request and puts
the rate-limit headers in the view's ``headers``, which DRF's
``finalize_response`` copies onto the response, allowed or denied: no
middleware is needed. For code that raises ``RateLimited`` in a DRF view, set
``REST_FRAMEWORK["EXCEPTION_HANDLER"]`` to :func:`exception_handler`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from rest_framework.exceptions import Throttled
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.views import exception_handler as drf_exception_handler

import django_rl.leases as leases
from django_rl.conf import get_settings
from django_rl.core.decision import Decision
from django_rl.core.recording import record_missing
from django_rl.core.reprs import short_repr
from django_rl.exceptions import ConfigurationError, RateLimited
from django_rl.http import settlement, slots
from django_rl.http.headers import write_headers
from django_rl.leases import Lease
from django_rl.policies import engine


class PolicyThrottle(BaseThrottle):
    """Throttle a DRF view by the policies its ``throttle_scope`` and ``throttle_policies`` name.

    The policies decide together, all or nothing (``policies/together.py``): a
    request one denies is counted by none. DRF makes
    a new throttle per request and calls :meth:`wait` on one that denied, so
    the Decisions are kept here for it, and nothing else.
    """

    decisions: tuple[Decision, ...] = ()

    def get_policy_names(self, view: Any) -> tuple[str, ...]:
        """Return ``throttle_scope`` and then ``throttle_policies``, else ``(DEFAULT_POLICY,)``.

        :raises ConfigurationError: if ``throttle_policies`` is not a list or
            tuple of names (``manage.py check`` reports it as django_rl.E052).
        """
        scope = getattr(view, "throttle_scope", None)
        more = getattr(view, "throttle_policies", ())
        if scope and type(more) is tuple and not more:
            return (scope,)  # the usual view: its scope alone
        if not isinstance(more, (list, tuple)) or not all(isinstance(n, str) for n in more):
            raise ConfigurationError(
                f"{type(view).__name__}.throttle_policies is {short_repr(more)}",
                check_id="django_rl.E052",
                hint="Write a list of policy names, e.g. throttle_policies = ['burst', 'daily']",
            )
        names = tuple(dict.fromkeys([scope, *more] if scope else more))
        if names:
            return names
        default = get_settings().default_policy
        return () if default is None else (default,)

    def allow_request(self, request: Any, view: Any) -> bool:
        verdict = limit_of(tuple(self.get_policy_names(view))).decide(
            request
        )  # the engine's one path
        self.decisions = tuple(verdict.decisions)
        headers = getattr(view, "headers", None)  # write_view_headers, inline: a frame fewer
        if isinstance(headers, dict):
            write_headers(headers, verdict.every)
        if verdict.held:
            # All or nothing: slots (concurrency) were taken only if none denied.
            hold_until_done(view, verdict.held, request)
        if settlement.SETTLING.on and settlement.owes(request):  # (an attribute test, usually)
            settle_when_done(view, request)
        return not verdict.blocking

    def wait(self) -> float | None:
        """Return seconds until a retry would be allowed: Retry-After, whole and at least 1."""
        waits = [d.retry_after_header for d in self.decisions if d.denies]
        return float(max(waits)) if waits else None


@functools.cache
def limit_of(names: tuple[str, ...]) -> engine.Limit:
    """Return the limit of a throttle's policy names, compiled once (names come from code)."""
    return engine.Limit(names)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's exception handler, with :class:`RateLimited` answered as DRF's ``Throttled``.

    Set ``REST_FRAMEWORK["EXCEPTION_HANDLER"] = "django_rl.throttling.exception_handler"``.
    The response is DRF's 429 (``Retry-After``, ``detail`` with the wait) with
    the rate-limit headers of every Decision the request collected.
    """
    if isinstance(exc, RateLimited):
        request, view = context.get("request"), context.get("view")
        if request is not None:
            write_view_headers(view, record_missing(request, exc.decisions))
        exc = Throttled(wait=exc.retry_after)
    return drf_exception_handler(exc, context)


def write_view_headers(view: Any, decisions: Sequence[Decision]) -> None:
    """Put the rate-limit headers of ``decisions`` in the DRF view's ``headers``.

    APIView.dispatch sets ``view.headers`` to a fresh dict per request and
    ``finalize_response`` copies it onto the response, the error response too.
    Shared by ``PolicyThrottle`` and ``@ratelimit`` on DRF views.
    """
    headers = getattr(view, "headers", None)
    if isinstance(headers, dict):
        write_headers(headers, decisions)


def hold_until_done(view: Any, held: Sequence[Lease], request: Any = None) -> None:
    """Give back ``held`` (concurrency slots) when the DRF ``view``'s request is done.

    ``request`` (DRF's, or Django's; default: the view's ``request``) holds
    them until it ends (``http/slots.py``): Django closes the response it
    sends, or gives up the request (an ASGI client that disconnected). A
    throttle and the hook around ``perform_authentication`` run inside
    ``APIView.dispatch``, which then calls the instance's
    ``finalize_response`` with the response (the view's own, or the one
    ``handle_exception`` made of an error) and returns it. So the instance's
    ``finalize_response`` hands the slots to that response's close (the
    usual way back), and its ``handle_exception`` gives them back at once
    when an exception escapes DRF (no response is made). Both are set on
    this instance only: DRF makes one per request.
    """
    if not held:
        return
    held_by = slots.hold(getattr(view, "request", None) if request is None else request, held)
    # Not an APIView: the request's end gives them back (or, for an object
    # that is not a request, the policy's timeout).
    _around_response(
        view,
        request,
        done=lambda _, response: slots.give_back_when_closed(response, held_by),
        failed=lambda _: leases.release(held),
    )


def settle_when_done(view: Any, request: Any) -> None:
    """Settle ``count_when``'s give-backs and ``charge`` once the DRF ``view`` has its response.

    DRF's throttles have no hook after the response: as :func:`hold_until_done`,
    the instance's ``finalize_response`` (which ``APIView.dispatch`` calls with
    the view's response, or the one ``handle_exception`` made of an error,
    whose status then says failure) settles after it, and its
    ``handle_exception`` settles a failure when an exception escapes DRF.
    Not an ``APIView``: ``RateLimitMiddleware`` settles after the response
    (``http/settlement.py``), else nothing is given back.
    """
    _around_response(view, request, done=settlement.settle_after, failed=settlement.settle_raised)


def _around_response(
    view: Any,
    request: Any,
    *,
    done: Callable[[Any, Any], object],
    failed: Callable[[Any], object],
) -> None:
    """Wrap the DRF ``view`` instance's ``finalize_response`` and ``handle_exception``.

    ``done(request, response)`` once ``finalize_response`` made the response;
    ``failed(request)`` when it, or ``handle_exception``, raises (the exception
    escapes DRF; ``request`` is then the one given here). Nothing for an
    object that is not an ``APIView``.
    """
    finalize = getattr(view, "finalize_response", None)
    handle = getattr(view, "handle_exception", None)
    if finalize is None or handle is None:
        return

    def finalize_response(request: Any, response: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            response = finalize(request, response, *args, **kwargs)
        except BaseException:
            failed(request)
            raise
        done(request, response)
        return response

    def handle_exception(exc: Exception) -> Any:
        try:
            return handle(exc)
        except BaseException:
            failed(request)
            raise

    view.finalize_response = finalize_response
    view.handle_exception = handle_exception
