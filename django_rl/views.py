"""The status view: a client's standing on the project's policies, as JSON, counting nothing.

``rate_limit_status`` answers ``GET`` (and ``HEAD``) with::

    {"policies": {"<name>": {"limit": 100, "remaining": 97, "reset": 1764806400,
                             "window": 3600}}}

for ``DJANGO_RL["STATUS_POLICIES"]`` (default: every policy in ``POLICIES``),
each read by :func:`django_rl.usage` (one round trip where the keys share a
node): ``reset`` is the Unix time in seconds when ``remaining`` is back to
``limit`` (now + ``reset_after``, rounded up). A policy whose key does not
apply to the request (``user`` for an anonymous one), whose rate is ``None``,
or that cannot be used (a key or rate function that raises, a policy that
fails its checks) is left out; when Redis cannot answer, a policy's entry is
its degraded Decision's (``docs/usage.md``). Never a 500, never counted (nor
by ``RULES``: the middleware leaves these views alone), ``Cache-Control:
no-store``. The JSON Schema of the answer is ``docs/schemas/rate_limit_status.schema.json``.

``rate_limit_status`` is a plain view: under WSGI it answers on the request's
thread, under ASGI Django runs it in its thread pool. ``arate_limit_status``
is its async twin (:func:`django_rl.ausage`, awaited on the event loop), for
an ASGI project that wants no thread for it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse

from django_rl.conf import get_settings
from django_rl.core.decision import Decision
from django_rl.policies.registry import Policy, get_policy
from django_rl.policies.usage import ausage, log_left_out, usage

logger = logging.getLogger("django_rl")

#: The attribute that tells ``RateLimitMiddleware`` a view is never counted (``RULES``).
UNCOUNTED = "django_rl_uncounted"
_METHODS = ("GET", "HEAD")


def rate_limit_status(request: HttpRequest) -> HttpResponse:
    """Answer the request's standing on ``STATUS_POLICIES`` as JSON (see the module)."""
    if request.method not in _METHODS:
        return HttpResponseNotAllowed(_METHODS)
    try:
        decisions = usage(request, status_policies())
    except Exception:
        logger.exception("django_rl: the status view could not read the policies")
        decisions = []
    return status_response(decisions)


async def arate_limit_status(request: HttpRequest) -> HttpResponse:
    """:func:`rate_limit_status` on the event loop (:func:`django_rl.ausage`)."""
    if request.method not in _METHODS:
        return HttpResponseNotAllowed(_METHODS)
    try:
        decisions = await ausage(request, status_policies())
    except Exception:
        logger.exception("django_rl: the status view could not read the policies")
        decisions = []
    return status_response(decisions)


setattr(rate_limit_status, UNCOUNTED, True)
setattr(arate_limit_status, UNCOUNTED, True)


def status_policies() -> list[Policy]:
    """Return the policies of ``STATUS_POLICIES`` that can be used, in order.

    A name that is not a policy, or a policy that fails its checks, is left
    out and logged (``manage.py check`` reports it: ``django_rl.E120``).
    """
    settings = get_settings()
    names: Any = settings.status_policies
    if names is None:
        names = list(settings.policies)
    elif not isinstance(names, (list, tuple)):
        logger.warning("django_rl: STATUS_POLICIES is not a list; the status view reports none")
        return []
    found = []
    for name in names:
        try:
            found.append(get_policy(name))
        except Exception as exc:
            log_left_out(str(name), exc, "the status view cannot use it:")
    return found


def status_body(decisions: Sequence[Decision], now: float | None = None) -> dict[str, Any]:
    """Return the status view's JSON for ``decisions`` (``now``: Unix seconds)."""
    if now is None:
        now = time.time()
    return {
        "policies": {
            d.policy: {
                "limit": d.limit,
                "remaining": d.remaining,
                "reset": math.ceil(now + d.reset_after),
                "window": d.window,
            }
            for d in decisions
        }
    }


def status_response(decisions: Sequence[Decision]) -> HttpResponse:
    """Return the JSON response of ``decisions``, never cached."""
    response = JsonResponse(status_body(decisions))
    response["Cache-Control"] = "no-store"
    return response
