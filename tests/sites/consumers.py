"""Websocket consumers limited by ``django_rl.contrib.channels.RateLimitMixin`` (tests/websockets/).

Each echoes what it receives (``echo:<text>``); none calls ``super()`` in
``connect()`` or ``receive()``: the mixin decides before them. They name
the policies of ``ws_policies.py``.
"""

from __future__ import annotations

from typing import Any

from channels.generic.websocket import (
    AsyncJsonWebsocketConsumer,
    AsyncWebsocketConsumer,
    WebsocketConsumer,
)

from django_rl.contrib.channels import RateLimitMixin
from tests.sites.ws_policies import POLICIES as POLICIES

#: Every ``connect()`` and ``receive()`` that ran, in order (the tests read and empty it).
CALLS: list[str] = []


class AsyncChat(RateLimitMixin, AsyncWebsocketConsumer):
    connect_policies = ("ws_connect",)
    message_policies = ("ws_message",)

    async def connect(self) -> None:
        CALLS.append("connect")
        await self.accept()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        CALLS.append(f"receive:{text_data}")
        await self.send(text_data=f"echo:{text_data}")

    async def disconnect(self, code: int) -> None:
        CALLS.append("disconnect")


class SyncChat(RateLimitMixin, WebsocketConsumer):
    connect_policies = ("ws_connect",)
    message_policies = ("ws_message",)

    def connect(self) -> None:
        CALLS.append("connect")
        self.accept()

    def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        CALLS.append(f"receive:{text_data}")
        self.send(text_data=f"echo:{text_data}")

    def disconnect(self, code: int) -> None:
        CALLS.append("disconnect")


class UserChat(RateLimitMixin, AsyncWebsocketConsumer):
    message_policies = ("ws_user_or_ip",)

    async def connect(self) -> None:
        await self.accept()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        await self.send(text_data=f"echo:{text_data}")


class TenantChat(RateLimitMixin, WebsocketConsumer):
    message_policies = ("ws_tenant",)

    def connect(self) -> None:
        self.accept()

    def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        self.send(text_data=f"echo:{text_data}")


class SlotChat(RateLimitMixin, AsyncWebsocketConsumer):
    """One socket open at a time per address (a ``concurrency`` policy)."""

    connect_policies = ("ws_slots",)


class JsonChat(RateLimitMixin, AsyncJsonWebsocketConsumer):
    """Answers a denied message its own way: ``rate_limited`` overridden (a coroutine)."""

    message_policies = ("ws_message",)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        await self.send_json({"echo": content})

    async def rate_limited(self, decisions: Any) -> None:
        await self.send_json({"slow down": [d.policy for d in decisions]})
        await self.close(code=4008)
