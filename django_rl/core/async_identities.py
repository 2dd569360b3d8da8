"""Identifying a request on the event loop: the async front doors' ``identify``.

The same identity functions as the sync path (``identities.py``); only how
they are called differs (see :func:`aidentify`).
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.utils.functional import LazyObject, empty

from django_rl.core.identities import (
    ClientAddress,
    IdentityFunction,
    checked_value,
    user_identity,
)


async def aidentify(function: IdentityFunction, request: Any) -> str | None:
    """Return ``function(request)`` on the event loop: the identity a request counts as.

    Built-in keys are computed on the loop. ``user``, ``user_or_ip`` and
    ``anon`` read the user by ``await request.auser()`` where Django has it
    (else in ``sync_to_async``, thread-sensitive, when the user is not loaded
    yet); a key callable of the project's is awaited when ``async def``,
    else run in ``sync_to_async`` (thread-sensitive: where Django runs the
    request's other sync code).
    """
    written = getattr(function, "written", None)
    if written is not None:
        user_function, name = written
        if iscoroutinefunction(user_function):
            return checked_value(await user_function(request), name)
        found: str | None = await sync_to_async(function, thread_sensitive=True)(request)
        return found
    if not _reads_user(function):
        return function(request)
    user = getattr(request, "user", None)
    if user is None or not isinstance(user, LazyObject) or user._wrapped is not empty:
        return function(request)  # no user, or one already loaded
    auser = getattr(request, "auser", None)
    if auser is None:
        found = await sync_to_async(function, thread_sensitive=True)(request)
        return found
    return function(_WithUser(request, await auser()))


def _reads_user(function: IdentityFunction) -> bool:
    if function is user_identity:
        return True
    return getattr(function, "__func__", None) in _READ_USER


#: The methods of the address keys that read the user (a policy's ``identify``
#: is one of them, bound: ``identities._address_identity``).
_READ_USER = (ClientAddress.user_or_ip, ClientAddress.anon)


class _WithUser:
    """A request whose ``user`` is the one ``auser()`` loaded; anything else is the request's."""

    __slots__ = ("_request", "user")

    def __init__(self, request: Any, user: Any) -> None:
        self._request = request
        self.user = user

    def __getattr__(self, name: str) -> Any:
        return getattr(self._request, name)
