"""``@ratelimit`` on async views decides on the event loop, under Django's real ASGI handler.

Exact under 500 concurrent requests; the same 429, Retry-After and headers
as the sync path; the decision on the loop's thread (a sync key callable
aside, in the request's thread); async key and rate callables awaited;
``block=False``; a class whose ``dispatch`` is async; ``request.auser()``
for the ``user`` keys, the lazy ``request.user`` never loaded on the loop.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.test import AsyncRequestFactory
from django.utils.functional import SimpleLazyObject

from django_rl.decorators import ratelimit
from tests.sites import urls_async
from tests.support.asgi import asgi_messages, body_of, get_scope

pytestmark = pytest.mark.urls("tests.sites.urls_async")


async def get(
    app: Any, path: str, client_ip: str = "127.0.0.1"
) -> tuple[int, dict[str, str], bytes]:
    """One GET through ``app``; return the status, the headers and the body."""
    sent = await asgi_messages(app, path, client_ip)
    headers = {k.decode().lower(): v.decode() for k, v in sent[0].get("headers", [])}
    return sent[0]["status"], headers, body_of(sent)


def run_requests(path: str, n: int, client_ip: str = "127.0.0.1") -> list[Any]:
    app = ASGIHandler()

    async def main() -> list[Any]:
        return await asyncio.gather(*(get(app, path, client_ip) for _ in range(n)))

    return asyncio.run(main())


@pytest.fixture(autouse=True)
def _seen_cleared() -> None:
    for seen in urls_async.SEEN.values():
        seen.clear()


def test_500_concurrent_requests_to_100_a_minute_let_exactly_100_through() -> None:
    answers = run_requests("/hundred/", 500)
    statuses = [status for status, _, _ in answers]
    assert (statuses.count(200), statuses.count(429)) == (100, 400)
    assert all("retry-after" in headers for status, headers, _ in answers if status == 429)


def test_the_async_view_answers_as_the_sync_one() -> None:
    async_answers = [run_requests("/limited/", 1)[0] for _ in range(6)]
    sync_answers = [run_requests("/limited-sync/", 1, "10.0.0.2")[0] for _ in range(6)]
    assert [s for s, _, _ in async_answers] == [200] * 5 + [429]
    assert [s for s, _, _ in sync_answers] == [200] * 5 + [429]
    for (_, a, a_body), (_, s, s_body) in zip(async_answers, sync_answers, strict=True):
        names = {n for n in s if n.startswith(("ratelimit", "x-ratelimit", "retry-after"))}
        assert names and names == {
            n for n in a if n.startswith(("ratelimit", "x-ratelimit", "retry-after"))
        }
        assert (
            a.get("ratelimit-policy", "").split(";")[1:]
            == s.get("ratelimit-policy", "").split(";")[1:]
        )
        assert a_body == s_body
    assert async_answers[-1][1]["retry-after"] == sync_answers[-1][1]["retry-after"]


def test_the_decision_runs_on_the_loops_thread(monkeypatch: Any) -> None:
    from django_rl.backends import aio_node

    threads: list[int] = []
    real = aio_node.ready

    def noting(node: Any) -> Any:  # (aio_node.ready: called on the loop's thread)
        threads.append(threading.get_ident())
        return real(node)

    monkeypatch.setattr(aio_node, "ready", noting)
    loop_thread: list[int] = []

    async def main() -> None:
        loop_thread.append(threading.get_ident())
        app = ASGIHandler()
        await asyncio.gather(*(get(app, "/async-key/") for _ in range(3)))

    asyncio.run(main())
    assert threads == loop_thread * 3
    assert urls_async.SEEN["async_key"] == loop_thread * 3
    assert urls_async.SEEN["view"] == loop_thread * 3


def test_a_sync_key_callable_runs_in_the_requests_thread() -> None:
    loop_thread: list[int] = []

    async def main() -> list[Any]:
        loop_thread.append(threading.get_ident())
        app = ASGIHandler()
        return [await get(app, "/sync-key/") for _ in range(5)]

    answers = asyncio.run(main())
    assert [s for s, _, _ in answers] == [200] * 4 + [429]
    assert len(urls_async.SEEN["sync_key"]) == 5
    assert loop_thread[0] not in urls_async.SEEN["sync_key"]


def test_an_async_rate_callable_is_awaited() -> None:
    statuses = [run_requests("/async-rate/", 1)[0][0] for _ in range(4)]
    assert statuses == [200, 200, 200, 429]


def test_block_false_runs_the_view_with_request_limited() -> None:
    bodies = [run_requests("/not-blocking/", 1)[0] for _ in range(3)]
    assert [s for s, _, _ in bodies] == [200, 200, 200]
    assert [b for _, _, b in bodies] == [b'{"limited": false}'] * 2 + [b'{"limited": true}']


def test_a_class_with_async_dispatch() -> None:
    statuses = [run_requests("/class/", 1)[0][0] for _ in range(4)]
    assert statuses == [200, 200, 200, 429]


def test_several_policies_together_on_the_loop(settings: Any) -> None:
    settings.DJANGO_RL = {
        "POLICIES": {
            "two_a": {"algorithm": "token_bucket", "capacity": 3, "rate": "3/m", "key": "ip"},
            "two_b": {"algorithm": "fixed_window", "rate": "5/m", "key": "ip"},
        }
    }
    answers = run_requests("/two/", 20)
    assert sorted(s for s, _, _ in answers) == [200] * 3 + [429] * 17


def test_user_keys_read_auser_and_never_load_request_user() -> None:
    class User:
        pk = 42
        is_authenticated = True

    @ratelimit(rate="2/m", key="user")
    async def view(request: Any) -> Any:
        from django.http import HttpResponse

        return HttpResponse("ok")

    def load_sync() -> Any:
        raise AssertionError("request.user loaded on the loop")

    async def auser() -> User:
        return User()

    async def main() -> list[int]:
        statuses = []
        for _ in range(3):
            request = AsyncRequestFactory().get("/")
            request.user = SimpleLazyObject(load_sync)
            request.auser = auser
            statuses.append((await view(request)).status_code)
        return statuses

    assert asyncio.run(main()) == [200, 200, 429]


def test_a_signal_receiver_is_awaited_on_the_loop() -> None:
    from django_rl.signals import rate_limited

    seen: list[tuple[str, int]] = []

    async def receiver(sender: Any, identity: str, **kwargs: Any) -> None:
        seen.append((identity, threading.get_ident()))

    rate_limited.connect(receiver)
    try:
        loop_thread: list[int] = []

        async def main() -> None:
            loop_thread.append(threading.get_ident())
            app = ASGIHandler()
            for _ in range(6):
                await get(app, "/limited/")

        asyncio.run(main())
    finally:
        rate_limited.disconnect(receiver)
    assert seen == [("ip:127.0.0.1", loop_thread[0])]


def test_the_sync_path_still_decides_in_its_thread() -> None:
    @ratelimit(rate="1/m", key="ip")
    def view(request: Any) -> Any:
        from django.http import HttpResponse

        return HttpResponse("ok")

    async def main() -> list[int]:
        request = AsyncRequestFactory().get("/")
        first = await sync_to_async(view)(request)
        second = await sync_to_async(view)(AsyncRequestFactory().get("/"))
        return [first.status_code, second.status_code]

    assert asyncio.run(main()) == [200, 429]


def test_an_async_streaming_response_holds_its_slot_until_it_ends(
    settings: Any, redis_client: Any
) -> None:
    settings.DJANGO_RL = {
        "POLICIES": {"slots": {"algorithm": "concurrency", "limit": 2, "timeout": 60, "key": "ip"}}
    }
    held_while_streaming: list[int] = []

    def held() -> int:
        return sum(int(redis_client.zcard(k)) for k in redis_client.keys("rl:slots:*"))

    async def main() -> tuple[int, bytes]:
        urls_async.RESUME[:] = [asyncio.Event()]
        pending = [{"type": "http.request", "body": b"", "more_body": False}]
        finished = asyncio.Event()
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            if pending:
                return pending.pop()
            await finished.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)
            if message["type"] == "http.response.body":
                if message.get("body") == b"first ":
                    held_while_streaming.append(held())
                    urls_async.RESUME[0].set()
                if not message.get("more_body"):
                    finished.set()

        await ASGIHandler()(get_scope("/streaming/"), receive, send)
        body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return sent[0]["status"], body

    status, body = asyncio.run(main())
    assert (status, body) == (200, b"first last")
    assert held_while_streaming == [1]
    assert held() == 0
