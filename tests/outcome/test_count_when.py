"""``count_when``: counted before the view, given back after the response when it does not count.

Every algorithm but ``concurrency``, both front doors (``@ratelimit`` on sync
and async views, DRF's ``PolicyThrottle`` and ``@ratelimit`` on a DRF view),
the policy key and the decorator's argument, words and callables; a view
that raises is a failure; a streaming response gives back when closed.
The state is read back from Redis (``peek``): what is left counted is
exactly the failures let through.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpResponse
from django.test import Client, RequestFactory

from django_rl import get_policy
from django_rl.decorators import ratelimit
from tests.outcome.site import ALGORITHMS, CLIENT, IDENTITY, LIMIT, policies
from tests.support.asgi import asgi_get

DOORS = ("login", "alogin", "api", "dapi")


@pytest.fixture(autouse=True)
def _site(settings: Any) -> None:
    settings.ROOT_URLCONF = "tests.outcome.site"
    settings.DJANGO_RL = {"POLICIES": policies()}


def used(name: str, identity: str = IDENTITY) -> int:
    """Return how much of ``name``'s limit ``identity`` has used, read from Redis."""
    decision = get_policy(name).peek(identity)
    return decision.limit - decision.remaining


def get(path: str) -> int:
    """GET ``path`` from :data:`CLIENT`: through Django's ASGI handler for an async view."""
    if "/alogin/" in path:
        status, _ = asyncio.run(asgi_get(ASGIHandler(), path, CLIENT))
        return status
    client = Client(REMOTE_ADDR=CLIENT, raise_request_exception=False)
    return client.get(path).status_code


def policy_of(algorithm: str, door: str) -> str:
    return f"plain_{algorithm}" if door == "dapi" else f"login_{algorithm}"


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_successes_are_given_back_and_failures_count(algorithm, door):
    name = policy_of(algorithm, door)
    bad = 400 if door in ("api", "dapi") else 401
    for _ in range(2 * LIMIT):
        assert get(f"/{algorithm}/{door}/ok/") == 200
        assert used(name) == 0
    for failures in range(1, LIMIT + 1):
        assert get(f"/{algorithm}/{door}/bad/") == bad
        assert used(name) == failures
    # The limit is reached: every request is refused, a success too, and nothing counts.
    assert get(f"/{algorithm}/{door}/bad/") == 429
    assert get(f"/{algorithm}/{door}/ok/") == 429
    assert used(name) == LIMIT


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_success_between_failures_leaves_them_counted(algorithm):
    name = f"login_{algorithm}"
    for _ in range(3):
        assert get(f"/{algorithm}/login/bad/") == 401
        assert get(f"/{algorithm}/login/ok/") == 200
    assert used(name) == 3


@pytest.mark.parametrize("door", ["login", "alogin"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_view_that_raises_is_a_failure(algorithm, door):
    for count in range(1, 3):
        assert get(f"/{algorithm}/{door}/raise/") == 500
        assert used(f"login_{algorithm}") == count


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_drf_errors_are_failures(algorithm):
    # AuthenticationFailed: DRF answers 403 (no authenticator to challenge with); counted.
    assert get(f"/{algorithm}/api/raise/") == 403
    assert used(f"login_{algorithm}") == 1


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_count_when_success_gives_back_failures(algorithm):
    name = f"plain_{algorithm}"
    for _ in range(2 * LIMIT):
        assert get(f"/{algorithm}/success/bad/") == 401
    assert get(f"/{algorithm}/success/raise/") == 500
    assert used(name) == 0
    assert get(f"/{algorithm}/success/ok/") == 200
    assert used(name) == 1


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_streaming_response_gives_back_when_closed(algorithm):
    client = Client(REMOTE_ADDR=CLIENT)
    response = client.get(f"/{algorithm}/success/stream/")
    assert response.status_code == 401
    assert used(f"plain_{algorithm}") == 1  # still streaming: counted
    assert b"".join(response.streaming_content) == b"nope"  # type: ignore[attr-defined]
    # Django's test client closes a streaming response after its last chunk.
    assert used(f"plain_{algorithm}") == 0


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_streaming_failure_stays_counted(algorithm):
    client = Client(REMOTE_ADDR=CLIENT)
    response = client.get(f"/{algorithm}/login/stream/")
    b"".join(response.streaming_content)  # type: ignore[attr-defined]
    assert used(f"login_{algorithm}") == 1


def _view(**arguments: Any) -> Any:
    @ratelimit("plain_sliding_log", **arguments)
    def view(request: Any) -> HttpResponse:
        return HttpResponse(status=int(request.GET.get("status", 200)))

    return view


def _call(view: Any, status: int) -> int:
    request = RequestFactory().get("/", {"status": status}, REMOTE_ADDR=CLIENT)
    return int(view(request).status_code)


def test_a_callable_decides(settings):
    view = _view(count_when=lambda request, response: response.status_code == 403)
    for status in (200, 401, 500, 403, 403):
        assert _call(view, status) == status
    assert used("plain_sliding_log") == 2


def test_a_dotted_path_decides():
    view = _view(count_when="tests.outcome.test_count_when.counts_teapots")
    for status in (200, 418, 401):
        _call(view, status)
    assert used("plain_sliding_log") == 1


def counts_teapots(request: Any, response: Any) -> bool:
    return bool(response.status_code == 418)


def test_the_decorators_count_when_wins_over_the_policys(settings):
    @ratelimit("login_sliding_log", count_when="always")
    def view(request: Any) -> HttpResponse:
        return HttpResponse("ok")

    for _ in range(3):
        view(RequestFactory().get("/", REMOTE_ADDR=CLIENT))
    assert used("login_sliding_log") == 3


def test_an_inline_policy_counts_when_told():
    @ratelimit(rate="2/h", key="ip", algorithm="sliding_log", count_when="failure")
    def view(request: Any) -> HttpResponse:
        return HttpResponse(status=int(request.GET.get("status", 200)))

    statuses = [_call(view, 200) for _ in range(5)]
    statuses += [_call(view, 401) for _ in range(3)]
    assert statuses == [200] * 5 + [401, 401, 429]


def raises(request: Any, response: Any) -> bool:
    raise RuntimeError("no idea")


def says_yes(request: Any, response: Any) -> str:
    return "yes"


@pytest.mark.parametrize(
    ("rule", "cause"),
    [(raises, "raised RuntimeError: no idea"), (says_yes, "returned 'yes', not a bool")],
)
def test_a_count_when_that_fails_counts_and_warns_once(caplog, rule, cause):
    view = _view(count_when=rule)
    with caplog.at_level(logging.WARNING, logger="django_rl"):
        statuses = [_call(view, 200) for _ in range(4)]
    assert statuses == [200] * 4  # the response unchanged
    assert used("plain_sliding_log") == 4  # nothing given back
    lines = [r for r in caplog.records if r.name == "django_rl" and cause in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].levelno == logging.WARNING
    assert rule.__qualname__ in lines[0].getMessage()


def test_a_denial_while_successes_are_in_flight_is_not_remembered(settings):
    """Five successes in flight fill the limit; the denial they cause ends with them."""
    import threading

    from django_rl.policies.deny_cache import get_deny_cache

    inside = threading.Semaphore(0)
    release = threading.Event()

    @ratelimit("login_sliding_log")
    def slow_login(request: Any) -> HttpResponse:
        inside.release()
        release.wait(10)
        return HttpResponse("welcome")

    def log_in() -> None:
        slow_login(RequestFactory().post("/", REMOTE_ADDR=CLIENT)).close()

    threads = [threading.Thread(target=log_in) for _ in range(LIMIT)]
    for thread in threads:
        thread.start()
    for _ in range(LIMIT):
        assert inside.acquire(timeout=10)
    try:
        assert used("login_sliding_log") == LIMIT
        # (Twice: a fresh deny cache reads the reset token at its first denial, and
        # remembers from the next.)
        assert get("/sliding_log/login/bad/") == 429
        assert get("/sliding_log/login/bad/") == 429
        denials = get_deny_cache()
        key = get_policy("login_sliding_log").key(IDENTITY)
        assert denials is None or denials.holds(key) is None  # decided by Redis each time
    finally:
        release.set()
        for thread in threads:
            thread.join()
    assert used("login_sliding_log") == 0
    assert get("/sliding_log/login/ok/") == 200


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_count_when_with_a_block(settings, algorithm):
    """With ``block_for``, successes are given back, and the failure that is denied blocks."""
    from tests.outcome.site import spec

    settings.DJANGO_RL = {
        "POLICIES": {f"login_{algorithm}": spec(algorithm, count_when="failure", block_for="1h")}
    }
    for _ in range(2 * LIMIT):
        assert get(f"/{algorithm}/login/ok/") == 200
    assert used(f"login_{algorithm}") == 0
    assert [get(f"/{algorithm}/login/bad/") for _ in range(LIMIT + 1)] == [401] * LIMIT + [429]
    decision = get_policy(f"login_{algorithm}").peek(IDENTITY)
    assert decision.retry_after > 3500  # blocked for the hour
    assert get(f"/{algorithm}/login/ok/") == 429
