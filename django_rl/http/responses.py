"""The HTTP answer to a denied request: 429 Too Many Requests.

Every 429 django_rl sends (from ``@ratelimit``, or from ``RateLimitMiddleware``
for a raised :class:`~django_rl.exceptions.RateLimited`) has ``Retry-After``
in whole seconds (the longest wait among the denying policies, rounded up,
at least 1) and the rate-limit headers of every Decision the request
collected. The body follows the client's ``Accept``:

* ``application/problem+json`` (RFC 9457) when the client asks for JSON
  (``application/json`` or ``application/problem+json``), with the
  ``quota-exceeded`` problem type of draft-ietf-httpapi-ratelimit-headers-11,
  ``retry_after`` in seconds and ``violated-policies``;
* a short HTML page when it asks for ``text/html`` (browsers);
* one line of plain text otherwise (``*/*``, curl).

Only explicitly named types count: a browser's ``*/*;q=0.8`` does not make it
a JSON client. ``DJANGO_RL["RATELIMITED_VIEW"]`` replaces the body with a view
of your own; django_rl still sets the status headers on its response.
DRF views keep DRF's own ``Throttled`` answer (see ``throttling.py``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest, HttpResponse
from django.utils.cache import patch_vary_headers
from django.utils.module_loading import import_string

from django_rl.conf import get_settings
from django_rl.core.problems import Problem
from django_rl.core.recording import record_missing
from django_rl.core.reprs import short_repr
from django_rl.exceptions import RateLimited
from django_rl.http.headers import write_headers

#: The problem type draft-ietf-httpapi-ratelimit-headers-11 (section 5.1) defines.
PROBLEM_TYPE = "https://iana.org/assignments/http-problem-types#quota-exceeded"
PROBLEM_TITLE = "Quota Exceeded"

_FORMATS = {
    "application/problem+json": "json",
    "application/json": "json",
    "text/html": "html",
    "application/xhtml+xml": "html",
}
#: Media ranges of ``Accept`` looked at; the rest of a longer header is ignored.
MAX_MEDIA_RANGES = 32


def too_many_requests(request: HttpRequest, exception: RateLimited) -> HttpResponse:
    """Return the 429 for ``exception``, its Decisions recorded on ``request``.

    The headers report every Decision of the request: those recorded by the
    front doors and those the exception carries.
    """
    decisions = record_missing(request, exception.decisions)
    view = _custom_view(get_settings().ratelimited_view)
    response = default_response(request, exception) if view is None else view(request, exception)
    response["Retry-After"] = str(exception.retry_after)
    write_headers(response, decisions)
    return response


def default_response(request: HttpRequest, exception: RateLimited) -> HttpResponse:
    """Return django_rl's own 429, in the format the client's ``Accept`` prefers."""
    wait = exception.retry_after
    detail = f"Too many requests. Retry after {wait} {'second' if wait == 1 else 'seconds'}."
    kind = preferred_format(request.headers.get("Accept", ""))
    if kind == "json":
        problem = {
            "type": PROBLEM_TYPE,
            "title": PROBLEM_TITLE,
            "status": 429,
            "detail": detail,
            "retry_after": wait,
            "violated-policies": list(dict.fromkeys(d.policy for d in exception.denied)),
        }
        response = HttpResponse(
            json.dumps(problem), status=429, content_type="application/problem+json"
        )
    elif kind == "html":
        response = HttpResponse(
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            "<title>429 Too Many Requests</title></head>\n"
            f"<body><h1>Too Many Requests</h1><p>{detail}</p></body></html>\n",
            status=429,
            content_type="text/html; charset=utf-8",
        )
    else:
        response = HttpResponse(f"{detail}\n", status=429, content_type="text/plain; charset=utf-8")
    patch_vary_headers(response, ["Accept"])
    return response


def preferred_format(accept: str) -> str:
    """Return ``"json"``, ``"html"`` or ``"text"``: the body ``Accept`` asks for.

    The explicitly named type with the highest ``q`` wins, the first one on
    a tie; wildcards and unknown types mean plain text.
    """
    best, best_q = "text", 0.0
    for media_range in accept.split(",", MAX_MEDIA_RANGES)[:MAX_MEDIA_RANGES]:
        media_type, _, parameters = media_range.partition(";")
        kind = _FORMATS.get(media_type.strip().lower())
        if kind is None:
            continue
        quality = _quality(parameters)
        if quality > best_q:
            best, best_q = kind, quality
    return best


def _quality(parameters: str) -> float:
    for parameter in parameters.split(";"):
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "q":
            try:
                quality = float(value.strip())
            except ValueError:
                return 0.0
            return quality if 0.0 <= quality <= 1.0 else 0.0
    return 1.0


def ratelimited_view_problems(value: object, *, resolve: bool = True) -> list[Problem]:
    """Return what is wrong with ``DJANGO_RL["RATELIMITED_VIEW"]``.

    :param resolve: also import the view and check it is a sync callable
        (``manage.py check`` does; reading the settings does not import views).
    """
    where = "DJANGO_RL['RATELIMITED_VIEW']"
    hint = (
        "Set it to None (django_rl's own 429) or to the dotted path of a sync "
        "view(request, exception) that returns the response, e.g. 'myapp.views.rate_limited'."
    )
    if value is None:
        return []
    if not isinstance(value, str) or "." not in value:
        return [Problem("django_rl.E051", f"{where} is {short_repr(value)}", hint)]
    if not resolve:
        return []
    shown = short_repr(value)
    try:
        view = import_string(value)
    except ImportError as exc:
        return [Problem("django_rl.E051", f"{where} {shown} could not be imported: {exc}", hint)]
    if not callable(view):
        return [Problem("django_rl.E051", f"{where} {shown} is not callable", hint)]
    if iscoroutinefunction(view):
        return [Problem("django_rl.E051", f"{where} {shown} is an async function", hint)]
    return []


@functools.cache
def _resolve(path: str) -> Callable[[HttpRequest, RateLimited], HttpResponse]:
    problems = ratelimited_view_problems(path)
    if problems:
        raise problems[0].as_exception()
    view: Callable[[HttpRequest, RateLimited], HttpResponse] = import_string(path)
    return view


def _custom_view(path: str | None) -> Callable[[HttpRequest, RateLimited], HttpResponse] | None:
    return None if path is None else _resolve(path)
