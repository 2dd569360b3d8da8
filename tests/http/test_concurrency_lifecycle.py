"""When a request's ``concurrency`` slots come back, whatever happens to its response.

The issue-28 audit: a cached response (``cache_page``, the site-wide cache
middleware, a cached DRF view) answered 500 and kept its slot; a 304 of
``ConditionalGetMiddleware`` kept the slot of the response it replaced; an
ASGI client that disconnected during a sync or DRF view left its slot held
until the policy's ``timeout``. Each slot comes back exactly once (one
``ZREM`` per request, counted by the server).
"""

from __future__ import annotations

import asyncio
import http.client
import pickle
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import django
import pytest
import redis
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished
from django.db import close_old_connections
from django.test import AsyncRequestFactory, RequestFactory

from django_rl import get_policy
from tests.sites import urls_concurrency
from tests.sites.urls_concurrency import IDENTITY
from tests.support.asgi import get_scope

LIMIT = 3
#: Django 5.0 and later cancel an ASGI request whose client disconnected.
CANCELS_ON_DISCONNECT = django.VERSION >= (5, 0)
POLICIES = {
    "slots": {"algorithm": "concurrency", "limit": LIMIT, "timeout": 30, "key": "ip"},
    "slow_slots": {
        "algorithm": "concurrency",
        "limit": LIMIT,
        "timeout": 30,
        "key": "tests.sites.urls_concurrency.slow_identity",
    },
}
CACHE_MIDDLEWARE = [
    "django.middleware.cache.UpdateCacheMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.cache.FetchFromCacheMiddleware",
]
pytestmark = pytest.mark.urls("tests.sites.urls_concurrency")


@pytest.fixture(autouse=True)
def policies(settings: Any, redis_client: redis.Redis) -> None:
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    settings.CACHES = {
        **settings.CACHES,
        "locmem": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    }
    from django.core.cache import caches

    caches["locmem"].clear()


def left(name: str = "slots") -> int:
    return get_policy(name).peek(IDENTITY).remaining


def zrems(client: redis.Redis) -> int:
    """Return how many ZREM the server has run: slots are given back by ZREM alone."""
    return int(client.info("commandstats").get("cmdstat_zrem", {}).get("calls", 0))


# Item 1: cached responses


def close(response: Any) -> None:
    """Close ``response`` as the test client does (without closing database connections)."""
    request_finished.disconnect(close_old_connections)
    try:
        response.close()
    finally:
        request_finished.connect(close_old_connections)


def test_a_response_holding_a_slot_pickles_and_its_copy_holds_none(redis_client):
    response = urls_concurrency.plain(RequestFactory().get("/plain/"))
    assert left() == LIMIT - 1
    copy = pickle.loads(pickle.dumps(response))
    assert copy.content == response.content == b"2"
    before = zrems(redis_client)
    close(copy)  # what a cache serves: it gives back nothing
    assert (left(), zrems(redis_client) - before) == (LIMIT - 1, 0)
    close(response)
    close(response)
    assert (left(), zrems(redis_client) - before) == (LIMIT, 1)


@pytest.mark.parametrize(
    "url", ["/cached/", "/cached-locmem/", "/drf-cached/", "/drf-decorated-cached/"]
)
def test_a_cached_response_is_served_and_its_slot_given_back_once(client, redis_client, url):
    before = zrems(redis_client)
    answers = [client.get(url) for _ in range(5)]
    assert [a.status_code for a in answers] == [200] * 5
    # The view ran once, holding one slot; the other four came from the cache.
    assert {a.content for a in answers} == {answers[0].content}
    assert left() == LIMIT
    assert zrems(redis_client) - before == 1


def test_a_view_that_serves_from_its_cache_holds_and_gives_back_each_time(client, redis_client):
    before = zrems(redis_client)
    answers = [client.get("/limited-then-cached/") for _ in range(5)]
    assert [(a.status_code, a.content) for a in answers] == [(200, b"2")] * 5
    assert left() == LIMIT
    assert zrems(redis_client) - before == 5


@pytest.mark.parametrize("alias", ["default", "locmem"])
@pytest.mark.parametrize("url", ["/plain/", "/drf/", "/drf-decorated/"])
def test_the_site_wide_cache_serves_and_gives_back(settings, client, redis_client, alias, url):
    settings.MIDDLEWARE = CACHE_MIDDLEWARE
    settings.CACHE_MIDDLEWARE_ALIAS = alias
    before = zrems(redis_client)
    answers = [client.get(url) for _ in range(5)]
    assert [a.status_code for a in answers] == [200] * 5
    assert {a.content for a in answers} == {answers[0].content}
    assert left() == LIMIT
    assert zrems(redis_client) - before == 1


# Item 4: a middleware replaces the response


@pytest.mark.parametrize("url", ["/tagged/", "/drf-tagged/"])
def test_a_304_gives_back_the_slot_of_the_response_it_replaced(settings, client, redis_client, url):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "django.middleware.http.ConditionalGetMiddleware"]
    before = zrems(redis_client)
    assert client.get(url).status_code == 200
    revalidated = [client.get(url, HTTP_IF_NONE_MATCH='"v1"') for _ in range(LIMIT + 2)]
    assert [r.status_code for r in revalidated] == [304] * (LIMIT + 2)
    assert left() == LIMIT
    assert zrems(redis_client) - before == LIMIT + 3


# A real WSGI server (the standard library's, which closes what the app returns)


@pytest.fixture
def serve(settings: Any) -> Iterator[Callable[[list[str]], str]]:
    """Serve Django's WSGIHandler with ``MIDDLEWARE`` on a free port; return its address."""
    servers: list[tuple[WSGIServer, threading.Thread]] = []

    def start(middleware: list[str]) -> str:
        settings.MIDDLEWARE = middleware
        server = make_server("127.0.0.1", 0, WSGIHandler(), handler_class=_QuietHandler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        servers.append((server, thread))
        return f"127.0.0.1:{server.server_port}"

    yield start
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join()


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


def all_back(deadline_s: float = 5.0) -> bool:
    """Wait until every slot is back: a server closes a response just after sending it."""
    give_up = time.monotonic() + deadline_s
    while left() != LIMIT and time.monotonic() < give_up:
        time.sleep(0.01)
    return left() == LIMIT


def wsgi_get(address: str, path: str, **headers: str) -> int:
    connection = http.client.HTTPConnection(address, timeout=10)
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


REVALIDATING = ["django.middleware.http.ConditionalGetMiddleware"]


@pytest.mark.parametrize("url", ["/tagged/", "/drf-tagged/"])
def test_a_wsgi_server_gives_back_the_slot_a_304_replaced(serve, redis_client, url):
    address = serve(REVALIDATING)
    before = zrems(redis_client)
    statuses = [wsgi_get(address, url, **{"If-None-Match": '"v1"'}) for _ in range(LIMIT + 2)]
    assert statuses == [304] * (LIMIT + 2)
    assert all_back()
    assert zrems(redis_client) - before == LIMIT + 2


@pytest.mark.parametrize("url", ["/tagged/", "/drf-tagged/"])
def test_a_wsgi_server_gives_back_the_slot_of_a_cached_response(serve, redis_client, url):
    address = serve([*CACHE_MIDDLEWARE[:-1], *REVALIDATING, CACHE_MIDDLEWARE[-1]])
    before = zrems(redis_client)
    # The first is cached by the site-wide middleware; the next are served
    # from the cache (no slot), or revalidated from it (304, no slot).
    assert [wsgi_get(address, url) for _ in range(LIMIT + 2)] == [200] * (LIMIT + 2)
    revalidated = [wsgi_get(address, url, **{"If-None-Match": '"v1"'}) for _ in range(2)]
    assert revalidated == [304, 304]
    assert all_back()
    assert zrems(redis_client) - before == 1


# Item 5: an ASGI client disconnects during a sync or DRF view


async def asgi_get(
    app: Any,
    path: str,
    headers: tuple[tuple[bytes, bytes], ...] = (),
    disconnect_when: threading.Event | None = None,
) -> list[dict[str, Any]]:
    """GET ``path`` through ``app``, as an ASGI server would; return what it sent.

    Run by ``asyncio.run``, as a server runs its loop: each request's sync
    code then runs in a thread of its own (``ThreadSensitiveContext``), not
    in the test's thread as under ``async_to_sync``.

    With ``disconnect_when``, the client disconnects once that is set (the
    proxy in front timed out, say); else once the response is sent.
    """
    scope = get_scope(path, headers=tuple(headers))
    messages = [{"type": "http.request", "body": b"", "more_body": False}]
    sent: list[dict[str, Any]] = []
    answered = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        if disconnect_when is None:
            await answered.wait()
        while disconnect_when is not None and not disconnect_when.is_set():
            await asyncio.sleep(0.01)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            answered.set()

    await app(scope, receive, send)
    return sent


def statuses(app: Any, path: str, times: int, *headers: tuple[bytes, bytes]) -> list[int]:
    """GET ``path`` through ``app`` ``times`` times, one after the other; return the statuses."""

    async def get_all() -> list[int]:
        return [(await asgi_get(app, path, headers))[0]["status"] for _ in range(times)]

    return asyncio.run(get_all())


@pytest.mark.parametrize(
    "url", ["/cached/", "/cached-locmem/", "/drf-cached/", "/drf-decorated-cached/"]
)
def test_under_asgi_a_cached_response_is_served_and_its_slot_given_back_once(redis_client, url):
    before = zrems(redis_client)
    assert statuses(ASGIHandler(), url, 5) == [200] * 5
    assert left() == LIMIT
    assert zrems(redis_client) - before == 1


@pytest.mark.parametrize("url", ["/tagged/", "/drf-tagged/"])
def test_under_asgi_a_304_gives_back_the_slot_it_replaced(settings, redis_client, url):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "django.middleware.http.ConditionalGetMiddleware"]
    app = ASGIHandler()
    before = zrems(redis_client)
    assert statuses(app, url, LIMIT + 2, (b"if-none-match", b'"v1"')) == [304] * (LIMIT + 2)
    assert left() == LIMIT
    assert zrems(redis_client) - before == LIMIT + 2


@pytest.mark.parametrize("url", ["/slow/", "/drf-slow/"])
def test_a_client_that_disconnects_during_a_sync_view_gives_its_slot_back(redis_client, url):
    urls_concurrency.running.clear()
    before = zrems(redis_client)
    sent = asyncio.run(asgi_get(ASGIHandler(), url, (), urls_concurrency.running))
    assert urls_concurrency.running.is_set()
    # Django 5.0 and later cancel a request whose client left: it answers
    # nothing. Django 4.2 does not listen: it answers a client that is gone.
    assert (sent == []) is CANCELS_ON_DISCONNECT
    assert left() == LIMIT
    assert zrems(redis_client) - before == 1


def test_a_request_cancelled_while_its_key_callable_runs_takes_no_slot(redis_client):
    # The decision runs on the loop; the sync key callable in the request's
    # thread. The client leaves meanwhile: Django 5.0+ cancels the request,
    # whose decision stops there, before any take (Django 4.2 answers it).
    urls_concurrency.deciding.clear()
    urls_concurrency.decided_at.clear()
    before = zrems(redis_client)
    sent = asyncio.run(asgi_get(ASGIHandler(), "/slow-to-decide/", (), urls_concurrency.deciding))
    assert (sent == []) is CANCELS_ON_DISCONNECT
    assert left("slow_slots") == LIMIT
    assert zrems(redis_client) - before == (0 if CANCELS_ON_DISCONNECT else 1)


def test_an_async_view_cancelled_while_deciding_holds_no_slot(redis_client):
    # No handler: the task running the view is cancelled (as a server's
    # would be) while its sync key callable runs; no slot is taken after it.
    urls_concurrency.deciding.clear()
    urls_concurrency.decided_at.clear()
    request = AsyncRequestFactory().get("/slow-to-decide/")

    async def cancel_while_deciding() -> float:
        task = asyncio.ensure_future(urls_concurrency.slow_to_decide(request))
        while not urls_concurrency.deciding.is_set():
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        while not urls_concurrency.decided_at:
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.3)  # (a take after the identity would be in Redis by now)
        return time.monotonic() - urls_concurrency.decided_at[0]

    before = zrems(redis_client)
    asyncio.run(cancel_while_deciding())
    assert left("slow_slots") == LIMIT
    assert zrems(redis_client) - before == 0
