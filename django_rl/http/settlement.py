"""When a request's give-backs and charges are settled: after its response.

The settling itself is ``policies/settling.py``.

The front doors call :func:`settle_after` with the view's response (or
:func:`settle_raised` when the view raised: a failure). A response that is
not streamed is settled at once, before it goes out, so a client that waits
for its answer before the next request always finds its hit given back; a
streaming one when Django closes it, once its body is sent (its status is
known before, but ``count_when`` and ``charge`` callables may read what it
streamed). ``RateLimitMiddleware`` settles what the view's front door left
(``RULES``' policies, a throttle of a view that did not finalize).
"""

from __future__ import annotations

import functools
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest

from django_rl.policies import settling
from django_rl.policies.settling import ATTRIBUTE, SETTLING, owes

__all__ = [
    "ATTRIBUTE",
    "SETTLING",
    "asettle_after",
    "asettle_raised",
    "owes",
    "settle_after",
    "settle_raised",
]


def _closers(response: Any) -> list[Any] | None:
    if not getattr(response, "streaming", False):
        return None
    closers = getattr(response, "_resource_closers", None)
    return closers if isinstance(closers, list) else None


def settle_after(request: Any, response: Any) -> None:
    """Settle what ``request`` owes for ``response``: now, or when a streaming one is closed."""
    if not owes(request):
        return
    closers = _closers(response)
    if closers is not None:
        closers.append(functools.partial(settling.settle, request, response))
        return
    settling.settle(request, response)


async def asettle_after(request: Any, response: Any) -> None:
    """:func:`settle_after` on the event loop (a streaming one settles when closed, in a thread)."""
    if not owes(request):
        return
    closers = _closers(response)
    if closers is not None:
        closers.append(functools.partial(settling.settle, request, response))
        return
    if not _served_by_asgi(request):  # (decided on the sync path: see decorators._acheck)
        await sync_to_async(settling.settle, thread_sensitive=True)(request, response)
        return
    await settling.asettle(request, response)


def settle_raised(request: Any) -> None:
    """Settle what ``request`` owes when its view raised (a failure)."""
    if owes(request):
        settling.settle(request, None, raised=True)


async def asettle_raised(request: Any) -> None:
    """:func:`settle_raised` on the event loop."""
    if not owes(request):
        return
    if not _served_by_asgi(request):
        await sync_to_async(settling.settle, thread_sensitive=True)(request, None, raised=True)
        return
    await settling.asettle(request, None, raised=True)


def _served_by_asgi(request: Any) -> bool:
    return isinstance(getattr(request, "_request", request), ASGIRequest)
