"""An ASGI scope seen as the request a policy's key reads (the Channels mixin's identities).

A policy's identity function (``core/identities.py``) reads a request:
``request.META`` for ``ip`` (``REMOTE_ADDR``, ``X-Forwarded-For`` behind
``NUM_PROXIES``, ``IP_META_KEY``), ``request.user`` for ``user`` and
``user_or_ip`` (``await request.auser()`` on the event loop),
``request.headers`` for ``header:<Name>``, ``request.GET`` for
``get:<name>``. :class:`ScopeRequest` gives those of a websocket's scope,
made as Django's ``ASGIRequest`` makes them (the ``client`` address as
``REMOTE_ADDR``, each header as ``HTTP_<NAME>``), so every key keeps its
rules: the same function decides, none copied. Imports no Channels.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any

from django.http import QueryDict
from django.http.request import HttpHeaders


def scope_meta(scope: Mapping[str, Any]) -> dict[str, Any]:
    """Return the ``META`` Django's ``ASGIRequest`` would make of ``scope``.

    ``REMOTE_ADDR`` (and ``REMOTE_PORT``) from ``client``, ``PATH_INFO``,
    ``QUERY_STRING``, and each header as ``HTTP_<NAME>`` (``-`` as ``_``,
    repeated headers joined by ``,``), ``CONTENT_TYPE``/``CONTENT_LENGTH``
    without the prefix.
    """
    meta: dict[str, Any] = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": scope.get("path", ""),
        "QUERY_STRING": _text(scope.get("query_string", b"")),
    }
    client = scope.get("client")
    if client:
        meta["REMOTE_ADDR"] = str(client[0])
        if len(client) > 1:
            meta["REMOTE_PORT"] = client[1]
    for raw_name, raw_value in scope.get("headers") or ():
        name = _text(raw_name).upper().replace("-", "_")
        value = _text(raw_value)
        if name not in ("CONTENT_LENGTH", "CONTENT_TYPE"):
            name = f"HTTP_{name}"
        if name in meta:
            value = f"{meta[name]},{value}"
        meta[name] = value
    return meta


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("latin1")
    return str(value)


class ScopeRequest:
    """What the keys of a policy read of a request, from a websocket's scope.

    One per decision (a connect, a message): the Decisions and
    ``limited`` recorded on it (``core/recording.record``), and an
    exemption decided for it, are that decision's. ``META`` is the
    consumer's, made once.
    """

    method = "GET"

    def __init__(self, scope: Mapping[str, Any], meta: dict[str, Any]) -> None:
        self.scope = scope
        self.META = meta
        self.path = scope.get("path", "")
        self.path_info = self.path
        self.user = scope.get("user")
        self.COOKIES = scope.get("cookies") or {}

    # Made when a key reads them (``header:``, ``get:``, ``post:``), not per message.
    @cached_property
    def headers(self) -> HttpHeaders:
        return HttpHeaders(self.META)

    @cached_property
    def GET(self) -> QueryDict:
        return QueryDict(self.META["QUERY_STRING"])

    @cached_property
    def POST(self) -> QueryDict:
        return QueryDict()

    async def auser(self) -> Any:
        """The scope's user (Channels' ``AuthMiddleware`` resolved it before the consumer)."""
        return self.user


__all__ = ["ScopeRequest", "scope_meta"]
