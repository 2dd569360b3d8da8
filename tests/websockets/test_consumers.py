"""``django_rl.contrib.channels.RateLimitMixin`` through Channels' own ``WebsocketCommunicator``.

Connect limits (a denied connect accepted, then closed with 4029, before
``connect()`` runs), message limits (a denied frame never reaches
``receive()``; ``rate_limited`` answers it), sync and async consumers each on
their own path, identities from the scope (``ip`` with ``NUM_PROXIES`` and
``IP_META_KEY``, ``user_or_ip``, ``header:<Name>``), a ``concurrency`` slot
held while a socket is open, and ``manage.py check`` of the consumers.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from types import SimpleNamespace
from typing import Any

import pytest
from channels.generic.websocket import AsyncWebsocketConsumer, WebsocketConsumer
from channels.testing import WebsocketCommunicator
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_rl.contrib.channels import RateLimitMixin
from django_rl.contrib.channels_checks import CONSUMERS, check_consumers
from django_rl.policies import engine
from tests.sites import consumers
from tests.sites.ws_policies import POLICIES

ADDRESS = "198.51.100.7"


@pytest.fixture(autouse=True)
def _policies(settings):
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    consumers.CALLS.clear()


def client_app(consumer: Any, address: str = ADDRESS, **scope: Any) -> Any:
    """``consumer``'s ASGI app, its scope given a ``client`` (the communicator sets none)."""
    app = consumer.as_asgi()

    async def with_client(given: dict[str, Any], receive: Any, send: Any) -> Any:
        return await app({**given, "client": [address, 50123], **scope}, receive, send)

    return with_client


async def open_socket(app: Any, path: str = "/ws/", **kwargs: Any) -> tuple[Any, Any]:
    """Connect; return the communicator and the close message that follows a denial (or None)."""
    communicator = WebsocketCommunicator(app, path, **kwargs)
    connected, _ = await communicator.connect()
    assert connected
    if await communicator.receive_nothing(0.1):
        return communicator, None
    return communicator, await communicator.receive_output()


@pytest.mark.parametrize("consumer", [consumers.AsyncChat, consumers.SyncChat])
def test_a_denied_connect_is_accepted_then_closed_with_4029(consumer):
    async def main() -> list[Any]:
        closes = []
        for _ in range(3):
            communicator, closed = await open_socket(client_app(consumer))
            closes.append(closed)
            await communicator.disconnect()
        return closes

    closes = asyncio.run(main())
    assert closes == [None, None, {"type": "websocket.close", "code": 4029}]
    # The third never reached connect(), nor disconnect().
    assert consumers.CALLS == ["connect", "disconnect", "connect", "disconnect"]


@pytest.mark.parametrize("consumer", [consumers.AsyncChat, consumers.SyncChat])
def test_a_denied_message_never_reaches_receive(consumer):
    async def main() -> list[Any]:
        communicator, _ = await open_socket(client_app(consumer))
        answers = []
        for n in range(5):
            await communicator.send_to(text_data=f"m{n}")
            answers.append(await communicator.receive_from())
        assert await communicator.receive_nothing(0.1)  # still open
        await communicator.disconnect()
        return answers

    answers = asyncio.run(main())
    assert answers[:3] == ["echo:m0", "echo:m1", "echo:m2"]
    for answer in answers[3:]:
        denied = json.loads(answer)
        assert denied["error"] == "rate_limited"
        assert isinstance(denied["retry_after"], int) and 0 < denied["retry_after"] <= 60
    assert consumers.CALLS == ["connect", "receive:m0", "receive:m1", "receive:m2", "disconnect"]


def test_rate_limited_is_a_coroutine_on_async_consumers_only():
    assert inspect.iscoroutinefunction(consumers.AsyncChat.rate_limited)
    assert inspect.iscoroutinefunction(consumers.AsyncChat.websocket_receive)
    assert not inspect.iscoroutinefunction(consumers.SyncChat.rate_limited)
    assert not inspect.iscoroutinefunction(consumers.SyncChat.websocket_connect)


def test_async_consumers_decide_on_the_loop_sync_ones_in_their_thread(monkeypatch):
    """The async consumer never takes the sync path (no thread for the decision), and back."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the other path")

    async def talk(consumer: Any) -> str:
        communicator, closed = await open_socket(client_app(consumer, "198.51.100.8"))
        assert closed is None
        await communicator.send_to(text_data="hi")
        answer = await communicator.receive_from()
        await communicator.disconnect()
        return str(answer)

    with monkeypatch.context() as patch:
        patch.setattr(engine.Limit, "decide", refuse)
        assert asyncio.run(talk(consumers.AsyncChat)) == "echo:hi"
    with monkeypatch.context() as patch:
        patch.setattr(engine.Limit, "adecide", refuse)
        assert asyncio.run(talk(consumers.SyncChat)) == "echo:hi"


def test_ip_follows_num_proxies_and_ip_meta_key(settings):
    settings.DJANGO_RL = {"POLICIES": POLICIES, "NUM_PROXIES": 1}
    forwarded = [(b"x-forwarded-for", b"203.0.113.50")]

    async def connects(meta: Any = forwarded) -> list[Any]:
        # Three proxies' addresses, one client behind them: one count.
        found = []
        for address in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
            communicator, closed = await open_socket(
                client_app(consumers.AsyncChat, address), headers=meta
            )
            found.append(closed)
            await communicator.disconnect()
        return found

    assert asyncio.run(connects()) == [None, None, {"type": "websocket.close", "code": 4029}]
    settings.DJANGO_RL = {"POLICIES": POLICIES, "IP_META_KEY": "HTTP_X_REAL_IP"}
    real = [(b"x-real-ip", b"203.0.113.60")]
    assert asyncio.run(connects(real))[2] == {"type": "websocket.close", "code": 4029}


def test_user_or_ip_counts_a_user_across_addresses():
    user = SimpleNamespace(is_authenticated=True, pk=42)

    async def messages(address: str, **scope: Any) -> list[str]:
        communicator, _ = await open_socket(client_app(consumers.UserChat, address, **scope))
        answers = []
        for n in range(2):
            await communicator.send_to(text_data=f"m{n}")
            answers.append(await communicator.receive_from())
        await communicator.disconnect()
        return answers

    assert asyncio.run(messages("198.51.100.20", user=user)) == ["echo:m0", "echo:m1"]
    second = asyncio.run(messages("198.51.100.21", user=user))
    assert [json.loads(a)["error"] for a in second] == ["rate_limited"] * 2
    # An anonymous client counts by its address.
    anonymous = SimpleNamespace(is_authenticated=False, pk=None)
    assert asyncio.run(messages("198.51.100.21", user=anonymous)) == ["echo:m0", "echo:m1"]


def test_a_header_key_counts_each_value_apart():
    async def messages(tenant: bytes) -> list[str]:
        app = client_app(consumers.TenantChat)
        communicator, _ = await open_socket(app, headers=[(b"x-tenant", tenant)])
        answers = []
        for n in range(3):
            await communicator.send_to(text_data=f"m{n}")
            answers.append(await communicator.receive_from())
        await communicator.disconnect()
        return answers

    assert asyncio.run(messages(b"acme"))[2].startswith('{"error": "rate_limited"')
    assert asyncio.run(messages(b"globex"))[:2] == ["echo:m0", "echo:m1"]


def test_a_concurrency_slot_is_held_while_the_socket_is_open():
    async def main() -> list[Any]:
        first, closed = await open_socket(client_app(consumers.SlotChat))
        assert closed is None
        second, denied = await open_socket(client_app(consumers.SlotChat))
        await second.disconnect()
        await first.disconnect()
        third, again = await open_socket(client_app(consumers.SlotChat))
        await third.disconnect()
        return [denied, again]

    assert asyncio.run(main()) == [{"type": "websocket.close", "code": 4029}, None]


def test_rate_limited_overridden():
    async def main() -> list[Any]:
        communicator, _ = await open_socket(client_app(consumers.JsonChat))
        answers = []
        for n in range(4):
            await communicator.send_json_to({"n": n})
            answers.append(await communicator.receive_output())
        return answers

    answers = asyncio.run(main())
    assert [json.loads(a["text"]) for a in answers[:3]] == [{"echo": {"n": n}} for n in range(3)]
    assert json.loads(answers[3]["text"]) == {"slow down": ["ws_message"]}


def test_the_mixin_must_come_first():
    with pytest.raises(TypeError, match="put RateLimitMixin before"):

        class Late(AsyncWebsocketConsumer, RateLimitMixin):
            pass


def test_check_reports_unknown_policies_of_consumers(settings):
    class Typo(RateLimitMixin, WebsocketConsumer):
        connect_policies = ("ws_conect",)
        message_policies = "ws_message"  # a bare string

    try:
        found = {(e.id, e.msg.split(" names ")[0].split(" is ")[0]) for e in check_consumers()}
        where = f"{__name__}.test_check_reports_unknown_policies_of_consumers.<locals>.Typo"
        assert ("django_rl.E140", f"{where}.connect_policies") in found
        assert ("django_rl.E141", f"{where}.message_policies") in found
        assert all(
            not e.id.startswith("django_rl.E14") or "Typo" in e.msg for e in check_consumers()
        )
    finally:
        CONSUMERS.discard(Typo)


def test_check_imports_asgi_application(settings):
    settings.ASGI_APPLICATION = "tests.sites.asgi_unknown.application"
    try:
        with pytest.raises(SystemCheckError, match=r"django_rl.E140.*'ws_nowhere'"):
            call_command("check")
    finally:
        for consumer in list(CONSUMERS):
            if consumer.__module__ == "tests.sites.asgi_unknown":
                CONSUMERS.discard(consumer)
    settings.ASGI_APPLICATION = "tests.sites.no_such_module.application"
    assert [e.id for e in check_consumers()] == ["django_rl.E142"]


@pytest.mark.parametrize("consumer", [consumers.AsyncChat, consumers.SyncChat])
@pytest.mark.parametrize("fail_open", [True, False])
def test_redis_down_follows_fail_open(settings, consumer, fail_open):
    from tests.support.redis_server import caches_for, free_port

    url = f"redis://127.0.0.1:{free_port()}/0"
    settings.CACHES = caches_for(url, SOCKET_CONNECT_TIMEOUT=0.2, SOCKET_TIMEOUT=0.2)
    settings.DJANGO_RL = {"POLICIES": POLICIES, "FAIL_OPEN": fail_open}

    async def main() -> tuple[Any, str | None]:
        communicator, closed = await open_socket(client_app(consumer, "198.51.100.30"))
        answer = None
        if closed is None:
            await communicator.send_to(text_data="hi")
            answer = await communicator.receive_from()
        await communicator.disconnect()
        return closed, answer

    closed, answer = asyncio.run(main())
    if fail_open:
        assert (closed, answer) == (None, "echo:hi")
    else:
        assert closed == {"type": "websocket.close", "code": 4029}


@pytest.mark.parametrize("consumer", [consumers.AsyncChat, consumers.SyncChat])
def test_messages_of_many_sockets_at_once_are_counted_exactly(consumer):
    """20 sockets of one address send 3 frames each, all at once: exactly 3 of 60 get through."""

    async def one() -> list[str]:
        communicator = WebsocketCommunicator(client_app(consumer, "198.51.100.40"), "/ws/")
        connected, _ = await communicator.connect()
        if not connected:
            return []
        for n in range(3):
            await communicator.send_to(text_data=f"m{n}")
        answers = [await communicator.receive_from() for _ in range(3)]
        await communicator.disconnect()
        return answers

    async def main() -> list[str]:
        return [a for answers in await asyncio.gather(*(one() for _ in range(20))) for a in answers]

    # Every socket may connect (ws_connect at 100/m); ws_message stays 3/m.
    policies = {**POLICIES, "ws_connect": {**POLICIES["ws_connect"], "rate": "100/m"}}
    with override_settings(DJANGO_RL={"POLICIES": policies}):
        answers = asyncio.run(main())
    assert len(answers) == 60
    assert sum(a.startswith("echo:") for a in answers) == 3
