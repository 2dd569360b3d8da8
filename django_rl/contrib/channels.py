"""Rate limits for Channels' websocket consumers: ``RateLimitMixin``.

Mix it in first, before ``WebsocketConsumer``, ``AsyncWebsocketConsumer``
or their JSON variants::

    class ChatConsumer(RateLimitMixin, AsyncJsonWebsocketConsumer):
        connect_policies = ["ws_connects"]  # per client address, say
        message_policies = ["ws_messages"]  # per user, say

* ``connect_policies``: decided when the client connects, before the
  consumer's ``connect()`` (and its ``groups``) run. A denied connect is
  accepted, then closed with code 4029 (:attr:`RateLimitMixin.rate_limit_close_code`),
  so browsers see the code (a connection refused before the handshake shows
  only 1006). A ``concurrency`` policy's slot is held while the socket is
  open and given back when it closes.
* ``message_policies``: decided for each frame the client sends, before
  ``receive()`` runs. A denied frame never reaches ``receive``; the
  consumer's ``rate_limited(decisions)`` is called instead, which by default
  sends ``{"error": "rate_limited", "retry_after": <seconds>}`` (the whole
  seconds ``Retry-After`` would say) and keeps the socket open.

Subclasses override ``connect()`` and ``receive()`` without calling
``super()``: the mixin decides in ``websocket_connect`` and
``websocket_receive``, Channels' handlers of the ASGI messages. On an
async consumer the handlers and ``rate_limited`` are coroutines and decide
on the event loop (``Limit.adecide``: no thread); on a sync one they are
plain methods and decide with the sync path (``Limit.decide``), in the
consumer's thread. Several policies of one list are decided together, all
or nothing, as at the front doors.

The identities come from the scope (``channels_scope.py``): ``ip`` is the
``client`` address with ``NUM_PROXIES`` and ``IP_META_KEY`` applied to the
scope's headers; ``user`` and ``user_or_ip`` read ``scope["user"]``
(Channels' ``AuthMiddlewareStack``); ``header:<Name>`` a header of the
handshake. ``manage.py check`` reports a consumer's unknown policies
(``django_rl.E140``, ``channels_checks.py``).
"""

from __future__ import annotations

import functools
import json
import types
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from channels.consumer import SyncConsumer
from channels.exceptions import StopConsumer

from django_rl import leases
from django_rl.contrib.channels_checks import CONSUMERS, names_of
from django_rl.contrib.channels_scope import ScopeRequest, scope_meta
from django_rl.core.decision import Decision
from django_rl.exceptions import ConfigurationError, RateLimited
from django_rl.policies.engine import Limit, Verdict

__all__ = ["RateLimitMixin"]


class _Sided:
    """A method that is a coroutine function on async consumers and a plain one on sync ones."""

    def __init__(self, sync: Callable[..., Any], async_: Callable[..., Any]) -> None:
        self.sync, self.async_ = sync, async_
        self.__doc__ = sync.__doc__

    def __get__(self, consumer: Any, owner: Any = None) -> Any:
        cls = owner if consumer is None else type(consumer)
        # (SyncConsumer is an AsyncConsumer too: the sync one is the exception.)
        function = self.sync if issubclass(cls, SyncConsumer) else self.async_
        return function if consumer is None else types.MethodType(function, consumer)


@functools.lru_cache(maxsize=256)
def _limit(names: tuple[str, ...]) -> Limit:
    """The limit of a consumer's policy names, compiled once (names come from code)."""
    return Limit(names)


def _names(consumer: Any, attribute: str) -> tuple[str, ...]:
    names = names_of(type(consumer), attribute)
    if names is None:
        raise ConfigurationError(
            f"{type(consumer).__qualname__}.{attribute} is not a list of policy names "
            "(django_rl.E141)"
        )
    return names


def _request(consumer: Any) -> ScopeRequest:
    meta = consumer.__dict__.get("_rl_meta")
    if meta is None:
        meta = consumer._rl_meta = scope_meta(consumer.scope)
    return ScopeRequest(consumer.scope, meta)


def frame(decisions: Sequence[Decision]) -> str:
    """The default answer to a denied message: ``{"error": "rate_limited", "retry_after": s}``."""
    return json.dumps({"error": "rate_limited", "retry_after": RateLimited(decisions).retry_after})


# The sync consumer's handlers (run in the consumer's thread).


def _connect(self: Any, message: Any) -> None:
    names = _names(self, "connect_policies")
    if names:
        verdict = _limit(names).decide(_request(self))
        if verdict.blocking:
            leases.release(verdict.held)
            self._rl_denied = True
            self.accept()
            self.close(code=self.rate_limit_close_code)
            return
        self._rl_held = list(verdict.held)
    super(RateLimitMixin, self).websocket_connect(message)


def _receive(self: Any, message: Any) -> None:
    if self._rl_denied:
        return  # a frame sent before the close of a denied connect: connect() never ran
    names = _names(self, "message_policies")
    if not names:
        super(RateLimitMixin, self).websocket_receive(message)
        return
    verdict: Verdict = _limit(names).decide(_request(self))
    try:
        if verdict.blocking:
            self.rate_limited(list(verdict.blocking))
            return
        super(RateLimitMixin, self).websocket_receive(message)
    finally:
        leases.release(verdict.held)


def _disconnect(self: Any, message: Any) -> None:
    if self._rl_denied:
        raise StopConsumer  # connect() never ran: nor does disconnect(), nor the groups
    held = self.__dict__.pop("_rl_held", None)
    try:
        super(RateLimitMixin, self).websocket_disconnect(message)
    finally:
        if held:
            leases.release(held)


def _rate_limited(self: Any, decisions: list[Decision]) -> None:
    """Answer a denied message: by default ``{"error": "rate_limited", "retry_after": s}``."""
    self.send(text_data=frame(decisions))


# The async consumer's handlers (on the event loop: the async path, no thread).


async def _aconnect(self: Any, message: Any) -> None:
    names = _names(self, "connect_policies")
    if names:
        verdict = await _limit(names).adecide(_request(self))
        if verdict.blocking:
            await leases.arelease(verdict.held)
            self._rl_denied = True
            await self.accept()
            await self.close(code=self.rate_limit_close_code)
            return
        self._rl_held = list(verdict.held)
    await super(RateLimitMixin, self).websocket_connect(message)


async def _areceive(self: Any, message: Any) -> None:
    if self._rl_denied:
        return  # a frame sent before the close of a denied connect: connect() never ran
    names = _names(self, "message_policies")
    if not names:
        await super(RateLimitMixin, self).websocket_receive(message)
        return
    verdict: Verdict = await _limit(names).adecide(_request(self))
    try:
        if verdict.blocking:
            await self.rate_limited(list(verdict.blocking))
            return
        await super(RateLimitMixin, self).websocket_receive(message)
    finally:
        if verdict.held:
            await leases.arelease(verdict.held)


async def _adisconnect(self: Any, message: Any) -> None:
    if self._rl_denied:
        raise StopConsumer  # connect() never ran: nor does disconnect(), nor the groups
    held = self.__dict__.pop("_rl_held", None)
    try:
        await super(RateLimitMixin, self).websocket_disconnect(message)
    finally:
        if held:
            await leases.arelease(held)


async def _arate_limited(self: Any, decisions: list[Decision]) -> None:
    """Answer a denied message: by default ``{"error": "rate_limited", "retry_after": s}``."""
    await self.send(text_data=frame(decisions))


class RateLimitMixin:
    """Connect and message limits for a websocket consumer (mix it in first).

    :cvar connect_policies: the policies a connect is decided by (names).
    :cvar message_policies: the policies each received frame is decided by.
    :cvar rate_limit_close_code: the close code of a denied connect (4029).
    """

    connect_policies: ClassVar[Sequence[str]] = ()
    message_policies: ClassVar[Sequence[str]] = ()
    rate_limit_close_code: ClassVar[int] = 4029
    #: This connect was denied: its frames and its disconnect reach nothing of the consumer's.
    _rl_denied = False

    websocket_connect = _Sided(_connect, _aconnect)
    websocket_receive = _Sided(_receive, _areceive)
    websocket_disconnect = _Sided(_disconnect, _adisconnect)
    #: Called with the denying Decisions of a message instead of ``receive``;
    #: a coroutine on async consumers. Override it to answer otherwise.
    rate_limited = _Sided(_rate_limited, _arate_limited)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        CONSUMERS.add(cls)
        for handler in ("websocket_connect", "websocket_receive"):
            for klass in cls.__mro__:
                if handler in klass.__dict__:
                    if klass.__module__.startswith("channels.") and klass is not cls:
                        raise TypeError(
                            f"{cls.__qualname__}: put RateLimitMixin before "
                            f"{klass.__qualname__} among its bases, or its limits never apply"
                        )
                    break
