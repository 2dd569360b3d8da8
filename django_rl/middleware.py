"""``RateLimitMiddleware``: site-wide ``RULES``, a raised ``RateLimited`` as django_rl's 429.

* **RULES** (``DJANGO_RL["RULES"]``, ``policies/site_rules.py``): before the
  view runs (``process_view``: the URL is resolved and every middleware's
  request phase is done, so ``request.user`` is set when
  ``AuthenticationMiddleware`` is in ``MIDDLEWARE``), the policies of every
  rule whose ``path`` regex matches ``request.path`` (and whose ``methods``
  hold its method) are decided together with the view's own limits
  (``@ratelimit`` on a function or a plain class-based view, ``PolicyThrottle``
  on a DRF view): all or nothing, one round trip where their keys share a
  slot, each policy counted once (``engine.decide_together``). A rule
  policy's denial is answered here, with the decorator's 429 (also before a
  DRF view); the view's own Verdicts are kept on the request, and its front
  door answers them as usual (the decorator's 429, DRF's ``Throttled``)
  without deciding again. An exempt request (``EXEMPT``) is decided by none.
  With no rules, ``process_view`` costs one attribute test.
* code that raises :class:`~django_rl.exceptions.RateLimited` in a plain
  Django view gets the same 429 the decorator sends (DRF views handle their
  exceptions themselves: use ``django_rl.throttling.exception_handler``);
* a counted request whose view raised (``Http404``, ``PermissionDenied``, an
  error) gets the rate-limit headers on the response Django made of it.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse

import django_rl.leases as leases
from django_rl.core.recording import recorded
from django_rl.decorators import LIMITS_ATTRIBUTE
from django_rl.exceptions import RateLimited
from django_rl.http import settlement, slots
from django_rl.http.headers import write_headers
from django_rl.http.responses import too_many_requests
from django_rl.policies import engine
from django_rl.policies.engine import Limit
from django_rl.policies.exempt import EXEMPTIONS
from django_rl.policies.site_rules import RULES

#: The request's attribute set when the rules' Verdict took concurrency slots.
_HOLDS = "_django_rl_rules_hold"


class RateLimitMiddleware:
    """Apply ``RULES``; answer ``RateLimited`` with 429; put the headers on every counted response.

    Sync and async: under ASGI it adds no thread hop (the headers are
    formatted on the event loop, in microseconds); Django runs
    ``process_view`` and ``process_exception`` in the request's sync thread.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if iscoroutinefunction(self):
            return self._acall(request)
        response: HttpResponse = self.get_response(request)
        # Rewrites what the front doors wrote with the same values: the
        # Decisions only grow while a request is handled.
        write_headers(response, recorded(request))
        if settlement.ATTRIBUTE in request.__dict__:  # RULES' count_when or charge
            settlement.settle_after(request, response)
        if _HOLDS in request.__dict__:
            slots.give_back_when_closed(response, slots.attached(request))
        return response

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        get_response: Callable[[HttpRequest], Awaitable[HttpResponse]] = self.get_response
        response = await get_response(request)
        write_headers(response, recorded(request))
        if settlement.ATTRIBUTE in request.__dict__:  # RULES' count_when or charge
            await settlement.asettle_after(request, response)
        if _HOLDS in request.__dict__:
            slots.give_back_when_closed(response, slots.attached(request))
        return response

    def process_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., Any],
        view_args: Any,
        view_kwargs: Any,
    ) -> HttpResponse | None:
        if not RULES.on:
            return None
        matched = RULES.matching(request)
        if not matched or (EXEMPTIONS.on and EXEMPTIONS.exempts(request)):
            return None
        if getattr(view_func, "django_rl_uncounted", False):  # the status view (views.py)
            return None
        verdict = engine.decide_together(request, matched, _own_limits(view_func))
        if verdict.blocking:
            leases.release(verdict.held)
            return too_many_requests(request, RateLimited(list(verdict.decisions)))
        if verdict.held:
            slots.hold(request, verdict.held)
            request.__dict__[_HOLDS] = True
        return None

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, RateLimited):
            return too_many_requests(request, exception)
        return None


def _own_limits(view: Callable[..., Any]) -> list[Limit]:
    """Return the view's own limits that the middleware can decide before it runs.

    ``@ratelimit`` on a function or on a plain class-based view (its
    ``dispatch``), and ``PolicyThrottle`` (and subclasses) of a DRF view.
    ``@ratelimit`` on a DRF view decides after DRF's authentication (its
    user), so it is left to the view.
    """
    found: list[Limit] = list(getattr(view, LIMITS_ATTRIBUTE, ()))
    cls = getattr(view, "view_class", None)
    if cls is None:
        return found
    found += getattr(getattr(cls, "dispatch", None), LIMITS_ATTRIBUTE, ())
    throttles = getattr(cls, "throttle_classes", None)
    if throttles and "rest_framework" in sys.modules:
        from django_rl import throttling

        for throttle in throttles:
            if isinstance(throttle, type) and issubclass(throttle, throttling.PolicyThrottle):
                try:
                    names = tuple(throttle().get_policy_names(cls))
                except Exception:  # decided (and reported) by the throttle itself
                    continue
                if names:
                    found.append(throttling.limit_of(names))
    return found
