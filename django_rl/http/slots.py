"""A request's ``concurrency`` slots: held while Django handles it, given back once.

The front doors hand the slots a request took to :func:`hold` (before the
view runs) and its response to :func:`give_back_when_closed`. Whichever of
the following comes first gives them back; a lease only once
(:func:`django_rl.leases.release` claims it), and in one ``ZREM`` round trip
for all of a request's slots:

* **the view's response is closed** (the usual way): Django closes every
  response once its body is sent, WSGI and ASGI, streaming included, and
  ``close()`` calls each of its ``_resource_closers``;
* **the request is closed**: Django's handler hands ``request.close`` to the
  response it sends (``BaseHandler.get_response``, sync and async), so when
  a middleware sent another response than the view's (a 304 of
  ``ConditionalGetMiddleware``, a cache's copy), closing that one still
  gives the slots back. :func:`hold` puts a closer of its own in the
  request's ``close`` (the request's own ``close`` still runs);
* **an ASGI request ends without a response** (the client disconnected and
  Django cancelled the request): Django's ``ASGIHandler`` then sends
  ``request_finished``, and the receiver below gives back the slots of that
  request, found by the request's ``ThreadSensitiveContext`` (asgiref's, one
  per request, made by the handler: what the view's thread and the
  handler's receivers both see). A sync view cannot be stopped: Django runs
  the receivers in the request's thread once the view has returned, so its
  slots come back then, not at the policy's ``timeout``;
* the view raised, or an async view's request was cancelled: at once (the
  front doors).

Slots the request takes after it ended (a decision still running in a
thread when the request was cancelled) are given back as soon as taken.

The closers pickle as closers with nothing to give back: Django's cache
(``cache_page``, ``UpdateCacheMiddleware``) pickles the response, and a copy
served from the cache holds no slot.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Any

from asgiref.sync import SyncToAsync
from django.core.handlers.asgi import ASGIHandler
from django.core.signals import request_finished
from django.http import HttpRequest

import django_rl.leases as leases
from django_rl.leases import Lease

#: The attribute of Django's ``HttpRequest`` that holds its :class:`Slots`.
ATTRIBUTE = "_django_rl_slots"

_lock = threading.Lock()


class Slots:
    """The slots one request holds, until it ends.

    Thread-safe: a request's view may run in one thread while its handler
    ends it in another (ASGI).
    """

    __slots__ = ("_ended", "_held")

    def __init__(self) -> None:
        self._held: list[Lease] = []
        self._ended = False

    def __repr__(self) -> str:
        state = "ended" if self._ended else "open"
        return f"<Slots: {len(self._held)} lease(s), {state}>"

    def __reduce__(self) -> tuple[type[Slots], tuple[()]]:
        # A pickled response (a cache's copy) holds no slot: its copy's
        # closer gives back nothing. Leases hold connections and locks.
        return (Slots, ())

    def add(self, held: Sequence[Lease]) -> None:
        """Hold ``held`` until the request ends; give them back now if it has ended."""
        with _lock:
            if not self._ended:
                self._held.extend(held)
                return
        leases.release(held)

    def give_back(self) -> None:
        """Give back the slots held so far (the response is closed)."""
        with _lock:
            held, self._held = self._held, []
        if held:
            leases.release(held)

    def end(self) -> None:
        """Give back the slots held, and any taken later at once (the request has ended)."""
        with _lock:
            self._ended = True
        self.give_back()


class _Closing:
    """The request's ``close``: gives back its slots, then closes it as before."""

    __slots__ = ("close", "slots")

    def __init__(self, slots: Slots, close: Any) -> None:
        self.slots = slots
        self.close = close

    def __call__(self) -> None:
        try:
            self.slots.end()
        finally:
            if self.close is not None:
                self.close()

    def __reduce__(self) -> tuple[type[_Closing], tuple[Slots, None]]:
        return (_Closing, (Slots(), None))


#: The slots of the ASGI requests in flight, by their ``ThreadSensitiveContext``.
_by_context: weakref.WeakKeyDictionary[Any, list[Slots]] = weakref.WeakKeyDictionary()


def _request_context() -> Any:
    """Return the ``ThreadSensitiveContext`` of the ASGI request being handled, or None."""
    var = getattr(SyncToAsync, "thread_sensitive_context", None)
    return None if var is None else var.get(None)


def hold(request: Any, held: Sequence[Lease]) -> Slots:
    """Hold ``held`` (slots ``request`` took) until the request ends; return the request's slots.

    ``request`` is Django's ``HttpRequest`` or DRF's ``Request``. The caller
    hands the result to :func:`give_back_when_closed` with the view's
    response (or gives ``held`` back itself if the view raises). For an
    object that is not an ``HttpRequest`` that is all that gives them back.
    """
    slots = attached(request)
    if held:
        slots.add(held)
    return slots


def end(request: Any) -> None:
    """End ``request``: give back its slots, and any it takes later at once.

    For a request that was cancelled while a thread may still be taking its
    slots (an async view's decision).
    """
    attached(request).end()


def give_back_when_closed(response: Any, slots: Slots) -> None:
    """Give back ``slots`` when Django closes ``response`` (now if it cannot be hooked)."""
    closers = getattr(response, "_resource_closers", None)
    if isinstance(closers, list):
        closers.append(slots.give_back)
    else:
        slots.give_back()


def attached(request: Any) -> Slots:
    """Return the slots of ``request`` (Django's or DRF's), made and hooked to its end if new.

    A new one is hooked to the request's ``close`` and, under ``ASGIHandler``,
    to its ``request_finished``; that of an object that is not an
    ``HttpRequest`` is ended by its caller's closers alone.
    """
    http_request = getattr(request, "_request", request)
    found: Slots | None = getattr(http_request, ATTRIBUTE, None)
    if found is not None:
        return found
    context = _request_context()
    with _lock:  # the request's thread and the event loop may both get here (end)
        again: Slots | None = getattr(http_request, ATTRIBUTE, None)
        if again is not None:
            return again
        slots = Slots()
        try:
            setattr(http_request, ATTRIBUTE, slots)
        except (AttributeError, TypeError):
            return slots  # an object without attributes: the caller's closers alone
        if isinstance(http_request, HttpRequest):
            # An instance attribute: what the handler hands the response it sends.
            http_request.close = _Closing(slots, http_request.close)  # type: ignore[method-assign]
            if context is not None:
                _by_context.setdefault(context, []).append(slots)
    return slots


def _request_finished(sender: Any, **kwargs: Any) -> None:
    """End the slots of the ASGI request that finished (also one that was cancelled).

    Django sends ``request_finished`` when it closes a response (most
    requests: their slots are back by then) and when ``ASGIHandler`` gives
    up a request whose client disconnected. Other senders (WSGI, the test
    clients, a response closed inside a view) are left to the closers.
    """
    if not _by_context or not (isinstance(sender, type) and issubclass(sender, ASGIHandler)):
        return
    context = _request_context()
    if context is None:
        return
    with _lock:
        ended = _by_context.pop(context, ())
    for slots in ended:
        slots.end()


# Connected when a front door is imported (not in AppConfig.ready): slots
# are given back whether or not "django_rl" is in INSTALLED_APPS.
request_finished.connect(_request_finished, dispatch_uid="django_rl.http.slots")
