"""``assert_rate_limited`` and ``assert_not_rate_limited``: what a test asserts of a response.

They read what any response object of a test has: ``status_code`` (or
``status``) and ``headers`` (Django's and DRF's test clients, ``requests``,
``httpx``), and the request Django's test client attaches
(``wsgi_request``/``asgi_request``) when there is one. A failure raises
``AssertionError`` saying what the response was instead: its status, its
Retry-After and its headers.
"""

from __future__ import annotations

import math
from typing import Any

#: Headers a failure message shows at most (the rate-limit ones first).
SHOWN_HEADERS = 12


def assert_rate_limited(response: Any, *, retry_after: int | float | range | None = None) -> int:
    """Assert that ``response`` is a rate limit's answer: 429 with ``Retry-After``.

    :param retry_after: the Retry-After expected, in whole seconds (a float
        is rounded up, as the header is), or a ``range`` of them
        (``range(55, 61)``); ``None``: any.
    :return: the response's Retry-After, in seconds.
    :raises AssertionError: if it is not a 429, has no (whole-second)
        Retry-After, or not the one expected; the message gives the status,
        Retry-After and headers it had.
    """
    status = _status(response)
    header = _header(response, "Retry-After")
    if status != 429:
        raise AssertionError(
            f"expected a rate-limited response (429 with Retry-After), got {_described(response)}"
            + _why_not(response, status)
        )
    if header is None:
        raise AssertionError(f"a 429 without Retry-After: {_described(response)}")
    try:
        seconds = int(header.strip())
    except ValueError:
        raise AssertionError(
            f"Retry-After {header!r} is not a whole number of seconds: {_described(response)}"
        ) from None
    if retry_after is not None and not _matches(seconds, retry_after):
        expected = retry_after if not isinstance(retry_after, float) else math.ceil(retry_after)
        raise AssertionError(
            f"Retry-After is {seconds}, expected {expected!r}: {_described(response)}"
        )
    return seconds


def assert_not_rate_limited(response: Any) -> None:
    """Assert that ``response`` is no rate limit's answer: not a 429, and not limited.

    Fails too when the request the test client attaches says
    ``request.limited`` (a view with ``block=False`` ran over its limit; the
    django-ratelimit drop-in's ``Ratelimited``, a 403).

    :raises AssertionError: with the status, Retry-After and headers it had.
    """
    status = _status(response)
    if status == 429:
        raise AssertionError(f"expected a response not rate limited, got {_described(response)}")
    if _request_limited(response):
        raise AssertionError(
            "expected a response not rate limited, but request.limited is True "
            f"(over a limit: a view with block=False, or a drop-in's 403): {_described(response)}"
        )


def _matches(seconds: int, expected: int | float | range) -> bool:
    if isinstance(expected, range):
        return seconds in expected
    if isinstance(expected, float):
        return seconds == math.ceil(expected)
    return seconds == expected


def _status(response: Any) -> int:
    status = getattr(response, "status_code", None)
    if status is None:
        status = getattr(response, "status", None)
    if not isinstance(status, int):
        raise TypeError(f"not a response (no status_code): {response!r}")
    return status


def _headers(response: Any) -> list[tuple[str, str]]:
    headers = getattr(response, "headers", None)
    if headers is None and hasattr(response, "items"):  # Django < 3.2's HttpResponse
        return [(str(k), str(v)) for k, v in response.items()]
    if headers is None:
        return []
    return [(str(k), str(v)) for k, v in headers.items()]


def _header(response: Any, name: str) -> str | None:
    wanted = name.lower()
    for key, value in _headers(response):
        if key.lower() == wanted:
            return value
    return None


def _request_limited(response: Any) -> bool:
    for attribute in ("wsgi_request", "asgi_request"):
        request = getattr(response, attribute, None)
        if request is not None and getattr(request, "limited", False) is True:
            return True
    return False


def _described(response: Any) -> str:
    """Return ``status 200 OK, Retry-After: absent, headers: {...}``."""
    status = _status(response)
    reason = getattr(response, "reason_phrase", None) or getattr(response, "reason", None) or ""
    retry_after = _header(response, "Retry-After")
    headers = sorted(
        _headers(response),
        key=lambda kv: (not kv[0].lower().startswith(("ratelimit", "x-ratelimit", "retry")), kv[0]),
    )
    shown = dict(headers[:SHOWN_HEADERS])
    more = f" (+{len(headers) - SHOWN_HEADERS} more)" if len(headers) > SHOWN_HEADERS else ""
    return (
        f"status {status}{' ' + reason if reason else ''}, "
        f"Retry-After: {'absent' if retry_after is None else repr(retry_after)}, "
        f"headers: {shown!r}{more}"
    )


def _why_not(response: Any, status: int) -> str:
    if status == 403 and _request_limited(response):
        return (
            " (a 403 with request.limited True: django-ratelimit's Ratelimited, which "
            "answers 403 as the original does; RATELIMIT_VIEW can answer 429)"
        )
    return ""


__all__ = ["assert_not_rate_limited", "assert_rate_limited"]
