"""The HTTP answer to a denied request."""

from __future__ import annotations

from collections.abc import Sequence

from django.http import HttpResponse

from django_rl.decision import Decision


def too_many_requests(denied: Sequence[Decision]) -> HttpResponse:
    """Return 429 Too Many Requests for one or more denying decisions.

    ``Retry-After`` (whole seconds, rounded up, at least 1) is the longest
    wait among them: retrying earlier would be denied again.
    """
    wait = max(decision.retry_after_header for decision in denied)
    unit = "second" if wait == 1 else "seconds"
    response = HttpResponse(
        f"Too many requests. Retry after {wait} {unit}.\n",
        status=429,
        content_type="text/plain; charset=utf-8",
    )
    response["Retry-After"] = str(wait)
    return response
