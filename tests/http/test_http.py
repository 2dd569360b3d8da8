"""Both front doors over HTTP: 429 with Retry-After, identities, methods, async."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient, Client

from django_rl.decorators import ratelimit
from tests.conftest import start_of_fresh_window

DECORATED = ["/limited/", "/limited-async/", "/class/", "/class-async/", "/method-decorated/"]


@pytest.fixture(autouse=True)
def _away_from_window_edges(redis_client):
    # 'per_minute' is a fixed window of 5/m: keep each test inside one window.
    start_of_fresh_window(redis_client, 60_000, min_left_ms=10_000)


def get_n(client, url, n, **extra):
    return [client.get(url, **extra) for _ in range(n)]


def assert_retry_after_is_valid(response):
    assert response.status_code == 429
    assert 1 <= int(response["Retry-After"]) <= 60


@pytest.mark.parametrize("url", DECORATED)
def test_sixth_request_to_a_decorated_view_gets_429(url):
    responses = get_n(Client(), url, 6)
    assert [r.status_code for r in responses] == [200] * 5 + [429]
    assert_retry_after_is_valid(responses[-1])
    wait = int(responses[-1]["Retry-After"])
    assert responses[-1]["Content-Type"] == "text/plain; charset=utf-8"
    unit = "second" if wait == 1 else "seconds"
    assert responses[-1].content.decode() == f"Too many requests. Retry after {wait} {unit}.\n"


def test_async_view_through_the_async_client():
    async def six_requests():
        client = AsyncClient()
        return [(await client.get("/limited-async/")).status_code for _ in range(6)]

    assert async_to_sync(six_requests)() == [200] * 5 + [429]


def test_sixth_request_to_a_drf_view_gets_drfs_429():
    responses = get_n(Client(), "/api/scoped/", 6)
    assert [r.status_code for r in responses] == [200] * 5 + [429]
    denied = responses[-1]
    assert_retry_after_is_valid(denied)
    wait = int(denied["Retry-After"])
    assert denied.json() == {
        "detail": f"Request was throttled. Expected available in {wait} second"
        + ("s." if wait != 1 else ".")
    }


def test_two_client_ips_are_counted_apart():
    client = Client()
    first = get_n(client, "/limited/", 6, REMOTE_ADDR="198.51.100.1")
    second = get_n(client, "/limited/", 6, REMOTE_ADDR="198.51.100.2")
    assert [r.status_code for r in first] == [200] * 5 + [429]
    assert [r.status_code for r in second] == [200] * 5 + [429]


@pytest.mark.parametrize("url", ["/limited/", "/api/scoped/"])
def test_a_forged_x_forwarded_for_does_not_change_the_identity(url):
    client = Client()
    responses = [
        client.get(url, HTTP_X_FORWARDED_FOR=f"10.9.8.{i}", REMOTE_ADDR="198.51.100.1")
        for i in range(6)
    ]
    assert [r.status_code for r in responses] == [200] * 5 + [429]


def test_only_the_named_methods_count():
    client = Client()
    assert [r.status_code for r in get_n(client, "/writes/", 5)] == [200] * 5
    posts = [client.post("/writes/").status_code for _ in range(3)]
    assert posts == [200, 200, 429]
    assert client.get("/writes/").status_code == 200


def test_an_unscoped_drf_view_is_not_limited():
    assert [r.status_code for r in get_n(Client(), "/api/unscoped/", 8)] == [200] * 8


def test_default_policy_limits_unscoped_drf_views(settings):
    settings.DJANGO_RL = {**settings.DJANGO_RL, "DEFAULT_POLICY": "writes"}
    responses = get_n(Client(), "/api/unscoped/", 3)
    assert [r.status_code for r in responses] == [200, 200, 429]


def test_a_view_governed_by_two_policies_needs_both(settings):
    from django.test import RequestFactory

    @ratelimit("writes", "per_minute")
    def view(request):
        from django.http import HttpResponse

        return HttpResponse("ok")

    rf = RequestFactory()
    codes = [view(rf.get("/")).status_code for _ in range(3)]
    assert codes == [200, 200, 429]


def test_ratelimit_needs_policy_names():
    with pytest.raises(TypeError, match="takes one or more policy names"):
        ratelimit()
    with pytest.raises(TypeError, match="takes one or more policy names"):
        ratelimit(lambda request: None)  # type: ignore[arg-type]


def test_decorated_views_keep_their_names():
    from tests.sites import views

    assert views.limited.__name__ == "limited"
    assert views.limited.django_rl_policies == ("per_minute",)
    assert views.LimitedClassView.django_rl_policies == ("per_minute",)


LOOPS_SEEN: list[bool] = []


def loop_probe(request):
    """An identity function that records whether an event loop runs in its thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        LOOPS_SEEN.append(False)
    else:
        LOOPS_SEEN.append(True)
    return "probe:1"


@pytest.mark.parametrize("url", ["/limited-async/", "/class-async/", "/limited/", "/class/"])
def test_async_views_decide_off_the_event_loop(settings, url):
    settings.DJANGO_RL = {
        "POLICIES": {
            "per_minute": {
                "algorithm": "fixed_window",
                "rate": "5/m",
                "key": "tests.http.test_http.loop_probe",
            }
        }
    }
    LOOPS_SEEN.clear()

    async def one_request():
        return (await AsyncClient().get(url)).status_code

    assert async_to_sync(one_request)() == 200
    assert LOOPS_SEEN == [False]
