"""``RateLimitMiddleware``: a raised ``RateLimited`` becomes django_rl's 429.

The front doors write their own headers and 429s; this middleware is for
what they cannot reach:

* code that raises :class:`~django_rl.exceptions.RateLimited` in a plain
  Django view gets the same 429 the decorator sends (DRF views handle their
  exceptions themselves: use ``django_rl.throttling.exception_handler``);
* a counted request whose view raised (``Http404``, ``PermissionDenied``, an
  error) gets the rate-limit headers on the response Django made of it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse

from django_rl.core.recording import recorded
from django_rl.exceptions import RateLimited
from django_rl.http.headers import write_headers
from django_rl.http.responses import too_many_requests


class RateLimitMiddleware:
    """Answer ``RateLimited`` with 429; put the rate-limit headers on every counted response.

    Sync and async: under ASGI it adds no thread hop (the headers are
    formatted on the event loop, in microseconds); Django runs
    ``process_exception`` in the request's sync thread.
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
        return response

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        get_response: Callable[[HttpRequest], Awaitable[HttpResponse]] = self.get_response
        response = await get_response(request)
        write_headers(response, recorded(request))
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, RateLimited):
            return too_many_requests(request, exception)
        return None
