"""``RateLimitMiddleware``: a raised ``RateLimited`` becomes django_rl's 429.

Only code that raises :class:`~django_rl.exceptions.RateLimited` in a plain
Django view needs it; the front doors write their own headers and 429s.
DRF views handle their exceptions themselves: use
``django_rl.throttling.exception_handler`` there.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.utils.deprecation import MiddlewareMixin

from django_rl.exceptions import RateLimited
from django_rl.responses import too_many_requests


class RateLimitMiddleware(MiddlewareMixin):
    """Answer a view's ``RateLimited`` with 429, ``Retry-After`` and the rate-limit headers.

    Works under WSGI and ASGI (Django runs ``process_exception`` in the
    request's sync thread).
    """

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, RateLimited):
            return too_many_requests(request, exception)
        return None
