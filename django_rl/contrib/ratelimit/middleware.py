"""``RatelimitMiddleware``: answer ``Ratelimited`` with the view ``RATELIMIT_VIEW`` names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.module_loading import import_string

from django_rl.contrib.ratelimit.exceptions import Ratelimited


class RatelimitMiddleware:
    """Turn a raised :class:`Ratelimited` into ``RATELIMIT_VIEW(request, exception)``.

    Other exceptions (a ``RATELIMIT_EXCEPTION_CLASS`` that is not a
    ``Ratelimited`` included) pass by. ``RATELIMIT_VIEW`` has no default: it
    is read when a request is refused, and its absence is an error then.
    """

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> Any:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, Ratelimited):
            return None
        view = import_string(getattr(settings, "RATELIMIT_VIEW"))  # noqa: B009 (no stub knows it)
        response: HttpResponse = view(request, exception)
        return response
