"""The django-ratelimit drop-in (``django_rl.contrib.ratelimit``) behaves as django-ratelimit 4.x.

Every documented behaviour of the original, and its own test suite's cases,
against the suite's real Redis: keys, rates, methods, blocking, the core
functions and their counts (every call counted, denied ones included), the
settings, the middleware, and the time left against the Redis server's clock.
"""

from __future__ import annotations

import io
import math
import re
import time
from functools import partial

import pytest
from django.core.cache import InvalidCacheBackendError, caches
from django.core.cache.backends.locmem import LocMemCache
from django.core.exceptions import ImproperlyConfigured
from django.test import RequestFactory
from django.utils.decorators import method_decorator
from django.views.generic import View

from django_rl.contrib import ratelimit as package
from django_rl.contrib.ratelimit import store
from django_rl.contrib.ratelimit.core import (
    _get_ip,
    _split_rate,
    get_usage,
    is_ratelimited,
)
from django_rl.contrib.ratelimit.decorators import ratelimit
from django_rl.contrib.ratelimit.exceptions import Ratelimited
from django_rl.contrib.ratelimit.middleware import RatelimitMiddleware
from tests.conftest import server_ms, sleep_until, start_of_fresh_window
from tests.sites.views_contrib_ratelimit import CustomRatelimitedException, mykey

rf = RequestFactory()


@pytest.fixture(autouse=True)
def _drop_in_policies_are_forgotten():
    """The policies a test made are not listed by the admin in later tests."""
    yield
    store.forget_policies()


@pytest.fixture(autouse=True)
def _minute_to_spare(redis_client):
    """No test's calls straddle the end of a minute's window on the Redis clock.

    Most tests count a few calls at rates per minute: a window ending between
    two of them would start the count again.
    """
    start_of_fresh_window(redis_client, 60_000, min_left_ms=3_000)


class MockUser:
    def __init__(self, authenticated: bool = False, pk: int = 1) -> None:
        self.pk = pk
        self.is_authenticated = authenticated


def _user_request(auth: bool, method: str = "post"):
    request = getattr(rf, method)("/")
    request.user = MockUser(authenticated=auth)
    return request


# --- the package and its names ---------------------------------------------


def test_the_constants_are_the_originals():
    assert package.ALL == (None,)
    assert package.UNSAFE == ["DELETE", "PATCH", "POST", "PUT"]
    for function in (ratelimit, is_ratelimited, get_usage):
        assert function.ALL is package.ALL
        assert function.UNSAFE is package.UNSAFE


def test_ratelimited_is_a_permission_denied():
    from django.core.exceptions import PermissionDenied

    assert issubclass(Ratelimited, PermissionDenied)


# --- rates -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100/s", (100, 1)),
        ("100/10s", (100, 10)),
        ("100/10", (100, 10)),
        ("100/m", (100, 60)),
        ("400/10m", (400, 600)),
        ("1000/h", (1000, 3600)),
        ("800/d", (800, 24 * 60 * 60)),
        ("100/5m", (100, 300)),
        ("100/300s", (100, 300)),
        ("100/300", (100, 300)),
        ("5/M", (5, 1)),  # only the start is read, as the original does
        ((7, 30), (7, 30)),
    ],
)
def test_split_rate(text, expected):
    assert _split_rate(text) == expected


def test_equal_rates_share_one_count():
    usage = partial(get_usage, group="g", key="ip", increment=True)
    assert usage(rf.get("/"), rate="100/5m")["count"] == 1
    assert usage(rf.get("/"), rate="100/300s")["count"] == 2
    assert usage(rf.get("/"), rate=(100, 300))["count"] == 3
    assert usage(rf.get("/"), rate="100/m")["count"] == 1  # another rate: its own count


def test_rate():
    @ratelimit(key="ip", rate="2/m", block=False)
    def twice(request):
        return request.limited

    assert not twice(rf.post("/"))
    assert not twice(rf.post("/"))
    assert twice(rf.post("/"))


def test_zero_rate_denies_and_counts():
    @ratelimit(key="ip", rate="0/m", block=False)
    def never(request):
        return request.limited

    assert never(rf.post("/"))
    assert get_usage(rf.post("/"), fn=never.__wrapped__, key="ip", rate="0/m") == {
        "count": 1,
        "limit": 0,
        "should_limit": True,
        "time_left": pytest.approx(30, abs=30),
    }


def test_none_rate_never_limits_and_counts_nothing(redis_client):
    @ratelimit(key="ip", rate=None, block=False)
    def always(request):
        return request.limited

    assert not any(always(rf.post("/")) for _ in range(7))
    assert get_usage(rf.get("/"), group="g", key="ip", rate=None) is None
    assert redis_client.dbsize() == 0


def test_a_period_of_zero_is_refused():
    with pytest.raises(ImproperlyConfigured):
        get_usage(rf.get("/"), group="g", key="ip", rate="5/0s")


def test_callable_rate():
    def get_rate(group, request):
        if request.user.is_authenticated:
            return (2, 60)
        return (1, 60)

    @ratelimit(key="user_or_ip", rate=get_rate, block=False)
    def view(request):
        return request.limited

    assert not view(_user_request(auth=False))
    assert view(_user_request(auth=False))
    assert not view(_user_request(auth=True))
    assert not view(_user_request(auth=True))
    assert view(_user_request(auth=True))


def test_callable_rate_gets_the_group():
    seen = []

    def get_rate(group, request):
        seen.append(group)
        return "5/m"

    assert not is_ratelimited(rf.get("/"), group="the-group", key="ip", rate=get_rate)
    assert seen == ["the-group"]


def test_callable_rate_none():
    def get_rate(group, request):
        return None if request.never_limit else "1/m"

    @ratelimit(key="ip", rate=get_rate, block=False)
    def view(request):
        return request.limited

    def make(never_limit: bool = False):
        request = rf.post("/")
        request.never_limit = never_limit
        return request

    assert not view(make())
    assert view(make())
    assert not view(make(never_limit=True))
    assert not view(make(never_limit=True))


def test_callable_rate_zero():
    def get_rate(group, request):
        return "1/m" if request.user.is_authenticated else "0/m"

    @ratelimit(key="ip", rate=get_rate, block=False)
    def view(request):
        return request.limited

    assert view(_user_request(auth=False))
    assert not view(_user_request(auth=True))
    assert view(_user_request(auth=True))


def test_callable_rate_by_dotted_path():
    @ratelimit(
        key="user_or_ip", rate="tests.sites.views_contrib_ratelimit.callable_rate", block=False
    )
    def view(request):
        return request.limited

    assert view(_user_request(auth=False))
    assert not view(_user_request(auth=True))


# --- keys --------------------------------------------------------------------


def test_no_key():
    @ratelimit(rate="1/m")
    def view(request):
        return True

    with pytest.raises(ImproperlyConfigured):
        view(rf.get("/"))


@pytest.mark.parametrize("key", ["nonsense", "cookie:x"])
def test_unknown_keys(key):
    with pytest.raises(ImproperlyConfigured):
        is_ratelimited(rf.get("/"), group="g", key=key, rate="1/m")


def test_ip():
    @ratelimit(key="ip", rate="1/m", block=False)
    def view(request):
        return request.limited

    assert not view(rf.get("/"))
    assert view(rf.get("/"))
    assert not view(rf.get("/", REMOTE_ADDR="10.0.0.9"))


def test_key_get():
    @ratelimit(key="get:foo", rate="1/m", method="GET", block=False)
    def view(request):
        return request.limited

    assert not view(rf.get("/", {"foo": "a"}))
    assert view(rf.get("/", {"foo": "a"}))
    assert not view(rf.get("/", {"foo": "b"}))
    assert view(rf.get("/", {"foo": "b"}))


def test_key_post():
    @ratelimit(key="post:foo", rate="1/m", block=False)
    def view(request):
        return request.limited

    assert not view(rf.post("/", {"foo": "a"}))
    assert view(rf.post("/", {"foo": "a"}))
    assert not view(rf.post("/", {"foo": "b"}))
    assert view(rf.post("/", {"foo": "b"}))


def test_key_header_and_a_missing_header():
    def make():
        request = rf.post("/")
        request.META["HTTP_X_REAL_IP"] = "1.2.3.4"
        return request

    @ratelimit(key="header:x-real-ip", rate="1/m", block=False)
    @ratelimit(key="header:x-missing-header", rate="1/m", block=False)
    def view(request):
        return request.limited

    assert not view(make())
    assert view(make())


def test_missing_values_share_one_bucket():
    usage = partial(get_usage, group="g", rate="5/m", increment=True)
    assert usage(rf.get("/"), key="get:q")["count"] == 1
    assert usage(rf.get("/"), key="header:x-nothing")["count"] == 2  # "" as well


def test_get_and_post_of_one_field_count_together():
    @ratelimit(key="get:q", rate="5/m", block=False)
    @ratelimit(key="post:q", rate="5/m", block=False)
    def search(request):
        return request.limited

    search(rf.get("/?q=x"))
    search(rf.post("/", {"q": "x"}))
    # Both decorators have the view's group: "x" was counted once by each.
    usage = get_usage(rf.get("/"), fn=search, key=lambda group, request: "x", rate="5/m")
    assert usage["count"] == 2


def test_user_and_user_or_ip():
    @ratelimit(key="user_or_ip", rate="1/m", block=False)
    def view(request):
        return request.limited

    assert not view(_user_request(auth=False))
    assert view(_user_request(auth=False))
    assert not view(_user_request(auth=True))
    assert view(_user_request(auth=True))

    @ratelimit(key="user", rate="1/m", block=False)
    def by_user(request):
        return request.limited

    request = _user_request(auth=True)
    request.user.pk = 42
    assert not by_user(request)
    assert by_user(request)


def test_callable_key_and_its_arguments():
    seen = []

    def key(group, request):
        seen.append(group)
        return request.META["REMOTE_ADDR"][::-1]

    @ratelimit(group="named", key=key, rate="1/m", block=False)
    def view(request):
        return request.limited

    assert not view(rf.post("/"))
    assert view(rf.post("/"))
    assert seen == ["named", "named"]


def test_callable_key_by_dotted_path():
    @ratelimit(key="tests.sites.views_contrib_ratelimit.mykey", rate="1/m", block=False)
    def view(request):
        return request.limited

    assert not view(rf.post("/"))
    assert view(rf.post("/"))
    usage = get_usage(rf.post("/"), fn=view.__wrapped__, key=mykey, rate="1/m")
    assert usage["count"] == 2  # the path and the function are one key


# --- methods -----------------------------------------------------------------


def test_method():
    @ratelimit(key="ip", method="POST", rate="1/m", group="a", block=False)
    def limit_post(request):
        return request.limited

    assert not limit_post(rf.post("/"))
    assert limit_post(rf.post("/"))
    assert not limit_post(rf.get("/"))


def test_unsafe_methods():
    @ratelimit(key="ip", method=ratelimit.UNSAFE, rate="0/m", block=False)
    def limit_unsafe(request):
        return request.limited

    assert not limit_unsafe(rf.get("/"))
    assert not limit_unsafe(rf.head("/"))
    assert not limit_unsafe(rf.options("/"))
    assert limit_unsafe(rf.delete("/"))
    assert limit_unsafe(rf.post("/"))
    assert limit_unsafe(rf.put("/"))
    assert limit_unsafe(rf.patch("/"))


def test_get_does_not_cover_head():
    @ratelimit(key="ip", method=["GET"], rate="1/m", block=False)
    def view(request):
        return request.limited

    assert not view(rf.get("/"))
    assert view(rf.get("/"))
    assert not view(rf.head("/"))
    assert not view(rf.head("/"))


def test_lower_case_methods_match():
    assert is_ratelimited(
        rf.post("/"), group="g", key="ip", rate="0/m", method="post", increment=True
    )


def test_stacked_decorators_keep_request_limited():
    @ratelimit(rate="1/m", block=False, key=lambda group, request: "min")
    @ratelimit(rate="10/d", block=False, key=lambda group, request: "day")
    def view(request):
        return request.limited

    assert not view(rf.post("/"))
    assert view(rf.post("/"))


def test_stacked_methods_count_separately():
    @ratelimit(rate="1/m", key="ip", method="GET", block=False)
    @ratelimit(rate="1/m", key="ip", method="POST", block=False)
    def view(request):
        return request.limited

    assert not view(rf.get("/"))
    assert not view(rf.post("/"))
    assert view(rf.get("/"))
    assert view(rf.post("/"))


def test_the_order_of_methods_does_not_matter():
    @ratelimit(rate="1/m", key="ip", method=["GET", "POST"], group="a", block=False)
    def get_post(request):
        return request.limited

    @ratelimit(rate="1/m", key="ip", method=["POST", "GET"], group="a", block=False)
    def post_get(request):
        return request.limited

    assert not get_post(rf.get("/"))
    assert post_get(rf.get("/"))


def test_views_share_a_group():
    @ratelimit(group="expensive", key="user_or_ip", rate="1/h", block=False)
    def view_a(request):
        return request.limited

    @ratelimit(group="expensive", key="user_or_ip", rate="1/h", block=False)
    def view_b(request):
        return request.limited

    assert not view_a(_user_request(auth=False))
    assert view_b(_user_request(auth=False))


def test_views_do_not_share_without_a_group():
    @ratelimit(key="ip", rate="1/m", block=False)
    def one(request):
        return request.limited

    @ratelimit(key="ip", rate="1/m", block=False)
    def two(request):
        return request.limited

    assert not one(rf.get("/"))
    assert not two(rf.get("/"))
    assert one(rf.get("/"))


# --- blocking and exceptions -------------------------------------------------


def test_block():
    @ratelimit(key="ip", rate="1/m")
    def blocked(request):
        return request.limited

    assert not blocked(rf.get("/"))
    with pytest.raises(Ratelimited):
        blocked(rf.get("/"))


@pytest.mark.parametrize(
    "chosen",
    [CustomRatelimitedException, "tests.sites.views_contrib_ratelimit.CustomRatelimitedException"],
)
def test_custom_exception_class(settings, chosen):
    settings.RATELIMIT_EXCEPTION_CLASS = chosen

    @ratelimit(key="ip", rate="1/m")
    def view(request):
        return request.limited

    request = rf.get("")
    assert not view(request)
    with pytest.raises(CustomRatelimitedException):
        view(request)


def test_a_blocked_request_is_a_403(settings, client):
    settings.ROOT_URLCONF = "tests.sites.urls_contrib_ratelimit"
    assert [client.get("/blocked/").status_code for _ in range(3)] == [200, 200, 403]
    assert [client.get("/annotated/").json() for _ in range(3)] == [
        {"limited": False},
        {"limited": False},
        {"limited": True},
    ]
    assert [client.get("/class/").status_code for _ in range(2)] == [200, 403]


def test_middleware_answers_with_ratelimit_view(settings, client):
    settings.ROOT_URLCONF = "tests.sites.urls_contrib_ratelimit"
    settings.MIDDLEWARE = [
        *settings.MIDDLEWARE,
        "django_rl.contrib.ratelimit.middleware.RatelimitMiddleware",
    ]
    settings.RATELIMIT_VIEW = "tests.sites.views_contrib_ratelimit.ratelimited_view"
    responses = [client.get("/blocked/") for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 429]
    assert responses[-1].json() == {"error": "Ratelimited"}


def test_middleware_lets_other_exceptions_by():
    middleware = RatelimitMiddleware(lambda request: None)
    assert middleware.process_exception(rf.get("/"), ValueError()) is None


def test_head_through_the_client_is_not_counted_by_get(settings, client):
    settings.ROOT_URLCONF = "tests.sites.urls_contrib_ratelimit"
    assert [client.head("/get-only/").status_code for _ in range(3)] == [200] * 3
    assert client.get("/get-only/").json() == {"limited": False}
    assert client.get("/get-only/").json() == {"limited": True}


# --- class-based views -------------------------------------------------------


def test_method_decorator():
    class TestView(View):
        @method_decorator(ratelimit(key="ip", rate="1/m", block=False))
        def post(self, request):
            return request.limited

    view = TestView.as_view()
    assert not view(rf.post("/"))
    assert view(rf.post("/"))


def test_class_decorator():
    @method_decorator(ratelimit(key="ip", rate="1/m", block=False), name="get")
    class TestView(View):
        def get(self, request):
            return request.limited

    view = TestView.as_view()
    assert not view(rf.get("/"))
    assert view(rf.get("/"))


def test_wrap_view():
    class TestView(View):
        def get(self, request):
            return request.limited

    wrapped = ratelimit(key="ip", rate="1/m", block=False)(TestView.as_view())
    assert not wrapped(rf.get("/"))
    assert wrapped(rf.get("/"))


def test_methods_and_views_count_separately():
    class TestView(View):
        @method_decorator(ratelimit(key="ip", rate="1/m", method="GET", block=False))
        def get(self, request):
            return request.limited

        @method_decorator(ratelimit(key="ip", rate="1/m", method="POST", block=False))
        def post(self, request):
            return request.limited

    class AnotherTestView(View):
        @method_decorator(ratelimit(key="ip", rate="1/m", method="GET", block=False))
        def get(self, request):
            return request.limited

    view, another = TestView.as_view(), AnotherTestView.as_view()
    assert not view(rf.get("/"))
    assert view(rf.get("/"))
    assert not view(rf.post("/"))
    assert not another(rf.get("/"))


# --- the core functions ------------------------------------------------------


def test_is_ratelimited_without_increment_counts_nothing():
    check = partial(is_ratelimited, increment=False, rate="1/m", key="ip", group="a")
    assert not check(rf.get("/"))
    assert not check(rf.get("/"))


def test_is_ratelimited_with_increment():
    hit = partial(is_ratelimited, increment=True, rate="1/m", key="ip", group="a")
    assert not hit(rf.get("/"))
    assert hit(rf.get("/"))


def test_get_usage():
    usage = get_usage(rf.get("/"), method=get_usage.ALL, key="ip", rate="1/m", group="a")
    assert usage["count"] == 0
    assert usage["limit"] == 1
    assert 0 < usage["time_left"] <= 60
    assert usage["should_limit"] is False


def test_get_usage_counts_every_call_past_the_limit():
    usage = partial(get_usage, key="ip", rate="2/m", group="a", increment=True)
    counts = [usage(rf.get("/")) for _ in range(5)]
    assert [u["count"] for u in counts] == [1, 2, 3, 4, 5]
    assert [u["should_limit"] for u in counts] == [False, False, True, True, True]
    assert {u["limit"] for u in counts} == {2}
    look = get_usage(rf.get("/"), key="ip", rate="2/m", group="a")
    assert (look["count"], look["should_limit"]) == (5, True)


def test_decorator_denials_are_counted_too():
    @ratelimit(key="ip", rate="1/m", block=False)
    def view(request):
        return request.limited

    for _ in range(4):
        view(rf.get("/"))
    assert get_usage(rf.get("/"), fn=view.__wrapped__, key="ip", rate="1/m")["count"] == 4


def test_get_usage_by_fn_reads_the_decorators_count():
    class TestView(View):
        @method_decorator(ratelimit(key="ip", rate="3/m", block=False))
        def get(self, request):
            return request.limited

    TestView.as_view()(rf.get("/"))
    # What method_decorator hands the decorator: a partial of the bound method.
    bound = partial(TestView.get.__get__(TestView(), TestView))
    assert get_usage(rf.get("/"), fn=bound, key="ip", rate="3/m")["count"] == 1


def test_get_usage_needs_a_group_or_a_function():
    with pytest.raises(ImproperlyConfigured):
        get_usage(rf.get("/"), key="ip")


def test_method_that_does_not_match_is_no_usage():
    assert get_usage(rf.get("/"), group="g", key="ip", rate="1/m", method="POST") is None


def _seconds_left(client, period_ms: int) -> float:
    return (period_ms - server_ms(client) % period_ms) / 1000


def test_time_left_against_the_redis_clock(redis_client):
    """``time_left``: the server's time left in the window, rounded up; a new window starts at 0."""
    period_ms = 2_000
    usage = partial(get_usage, group="t", key="ip", rate="1/2s")
    start_of_fresh_window(redis_client, period_ms, min_left_ms=1_500)
    before = _seconds_left(redis_client, period_ms)
    first = usage(rf.get("/"), increment=True)
    after = _seconds_left(redis_client, period_ms)
    # Within the window (the server's clock), between the reads before and after the call.
    assert math.ceil(after) <= first["time_left"] <= math.ceil(before)
    assert first["count"] == 1
    assert usage(rf.get("/"), increment=True)["count"] == 2
    assert is_ratelimited(rf.get("/"), group="t", key="ip", rate="1/2s")
    now = server_ms(redis_client)
    sleep_until(redis_client, now + period_ms - now % period_ms + 50)  # the next window
    before = _seconds_left(redis_client, period_ms)
    fresh = usage(rf.get("/"))
    after = _seconds_left(redis_client, period_ms)
    assert (fresh["count"], fresh["should_limit"]) == (0, False)
    # No key yet: from this process's bounds on the server's clock (a few ms wide).
    assert math.ceil(after - 0.05) <= fresh["time_left"] <= math.ceil(before + 0.05)
    assert not is_ratelimited(rf.get("/"), group="t", key="ip", rate="1/2s", increment=True)


def test_a_decision_is_one_transaction(redis_client):
    # Another client first: the policy's rate is recorded in the catalogue
    # (once per rate, process and day), and the connection is made.
    is_ratelimited(rf.get("/", REMOTE_ADDR="10.9.9.9"), group="rt", key="ip", rate="5/m")
    is_ratelimited(
        rf.get("/", REMOTE_ADDR="10.9.9.9"), group="rt", key="ip", rate="5/m", increment=True
    )
    redis_client.config_resetstat()
    for _ in range(10):
        is_ratelimited(rf.get("/"), group="rt", key="ip", rate="5/m", increment=True)
    stats = redis_client.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): s["calls"] for name, s in stats.items()}
    calls.pop("config|resetstat", None)
    calls.pop("info", None)
    calls.pop("time", None)  # the clock's occasional reading (every 30 s), if it fell here
    # One MULTI/EXEC each, of the fixed window's commands (INCRBY, PEXPIREAT,
    # PTTL; with CLOCK "app": INCRBY, PEXPIRE).
    assert calls.pop("multi") == calls.pop("exec") == 10
    assert "incrby" in calls
    assert set(calls.values()) == {10}


def test_the_state_has_a_ttl_and_its_policys_keys(redis_client):
    from django_rl.policies.inline import policy_name

    is_ratelimited(rf.get("/"), group="keys", key="ip", rate="5/m", increment=True)
    keys = [k.decode() for k in redis_client.keys("rl:@keys:*")]
    assert len(keys) == 1
    assert keys[0].startswith(f"rl:{policy_name('keys')}:{{ip:127.0.0.1}}:")
    assert 0 < redis_client.pttl(keys[0]) <= 60_000


# --- settings ----------------------------------------------------------------


def test_ratelimit_enable_false(settings, redis_client):
    settings.RATELIMIT_ENABLE = False

    @ratelimit(key="ip", rate="0/m")
    def view(request):
        return request.limited

    assert not view(rf.get("/"))
    assert get_usage(rf.get("/"), group="g", key="ip", rate="0/m", increment=True) is None
    assert redis_client.dbsize() == 0


def test_use_cache_names_the_cache(settings):
    settings.CACHES = {**settings.CACHES, "limits": settings.CACHES["default"]}
    settings.RATELIMIT_USE_CACHE = "limits"
    assert not is_ratelimited(rf.get("/"), group="g", key="ip", rate="1/m", increment=True)
    assert is_ratelimited(rf.get("/"), group="g", key="ip", rate="1/m", increment=True)


def test_an_unknown_cache(settings):
    settings.RATELIMIT_USE_CACHE = "fake-cache"

    @ratelimit(key="ip", rate="1/m", block=False)
    def view(request):
        return request.limited

    with pytest.raises(InvalidCacheBackendError):
        view(rf.post("/"))


# --- RATELIMIT_USE_CACHE naming a cache that is not django-redis ---------------

LOCMEM = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "rl-tests"}
DUMMY = {"BACKEND": "django.core.cache.backends.dummy.DummyCache"}


class BrokenCache(LocMemCache):
    """A cache whose every call fails, as an unreachable memcached's does."""

    def add(self, *args, **kwargs):
        raise ConnectionRefusedError("the cache is down")

    get = incr = add


def _host_window_to_spare(period_s: int, min_left_s: float = 2.0) -> None:
    """Wait, if need be, so that no test's calls straddle a window's end on this host's clock."""
    left = period_s - time.time() % period_s
    if left < min_left_s:
        time.sleep(left + 0.01)


@pytest.fixture
def locmem_cache(settings):
    settings.CACHES = {**settings.CACHES, "local": LOCMEM}
    settings.RATELIMIT_USE_CACHE = "local"
    caches["local"].clear()
    _host_window_to_spare(60)
    yield caches["local"]
    caches["local"].clear()


def test_a_locmem_cache_counts_there_as_the_original(locmem_cache, redis_client):
    hit = partial(get_usage, group="local", key="ip", rate="2/m", increment=True)
    counts = [hit(rf.get("/")) for _ in range(4)]
    assert [(u["count"], u["limit"], u["should_limit"]) for u in counts] == [
        (1, 2, False),
        (2, 2, False),
        (3, 2, True),  # every call counted, denied ones too, as the original counts
        (4, 2, True),
    ]
    look = get_usage(rf.get("/"), group="local", key="ip", rate="2/m")
    assert (look["count"], look["should_limit"]) == (4, True)  # a read counts nothing
    assert hit(rf.get("/", REMOTE_ADDR="192.0.2.9"))["count"] == 1  # another key, its own count
    assert redis_client.dbsize() == 0  # nothing in Redis
    assert len(locmem_cache._cache) == 2  # one count per key and window

    @ratelimit(key="ip", rate="1/m", block=False)
    def view(request):
        return request.limited

    assert [view(rf.post("/")), view(rf.post("/"))] == [False, True]


def test_a_locmem_count_ends_with_its_window_on_this_hosts_clock(locmem_cache):
    _host_window_to_spare(2, min_left_s=1.5)
    before = math.ceil(2 - time.time() % 2)
    usage = get_usage(rf.get("/"), group="short", key="ip", rate="1/2s", increment=True)
    after = math.ceil(2 - time.time() % 2)
    assert after <= usage["time_left"] <= before
    assert get_usage(rf.get("/"), group="short", key="ip", rate="1/2s", increment=True)[
        "should_limit"
    ]
    time.sleep(2 - time.time() % 2 + 0.05)  # the next window
    usage = get_usage(rf.get("/"), group="short", key="ip", rate="1/2s", increment=True)
    assert (usage["count"], usage["should_limit"]) == (1, False)


def test_a_dummy_cache_counts_each_call_as_the_first(settings, redis_client):
    """The original's test settings' "instant expiration": a DummyCache keeps nothing."""
    settings.CACHES = {**settings.CACHES, "instant-expiration": DUMMY}
    settings.RATELIMIT_USE_CACHE = "instant-expiration"

    @ratelimit(key="ip", rate="1/m")
    def view(request):
        return True

    assert view(rf.get("/")) and view(rf.get("/"))
    usage = get_usage(rf.get("/"), group="d", key="ip", rate="1/m", increment=True)
    assert (usage["count"], usage["should_limit"]) == (1, False)
    assert get_usage(rf.get("/"), group="d", key="ip", rate="1/m")["count"] == 0
    assert is_ratelimited(rf.get("/"), group="d", key="ip", rate="0/m", increment=True)
    assert redis_client.dbsize() == 0


def test_a_failing_cache_follows_ratelimit_fail_open(settings):
    settings.CACHES = {
        **settings.CACHES,
        "broken": {"BACKEND": "tests.contrib.test_contrib_ratelimit.BrokenCache"},
    }
    settings.RATELIMIT_USE_CACHE = "broken"
    hit = partial(get_usage, group="b", key="ip", rate="10/m", increment=True)
    assert hit(rf.get("/")) == {"count": 0, "limit": 0, "should_limit": True, "time_left": -1}
    look = get_usage(rf.get("/"), group="b", key="ip", rate="10/m")
    assert (look["count"], look["limit"], look["should_limit"]) == (0, 10, False)
    settings.RATELIMIT_FAIL_OPEN = True
    assert hit(rf.get("/")) is None
    assert not is_ratelimited(rf.get("/"), group="b", key="ip", rate="1/m", increment=True)


def test_the_checks_say_where_the_counts_live(settings):
    from django_rl.contrib.ratelimit_checks import check_ratelimit_cache

    assert check_ratelimit_cache() == []  # the suite's default: django-redis
    settings.CACHES = {**settings.CACHES, "local": LOCMEM}
    settings.RATELIMIT_USE_CACHE = "local"
    (warning,) = check_ratelimit_cache()
    assert warning.id == "django_rl.W091"
    assert "CACHES['local']" in warning.msg and "LocMemCache" in warning.msg
    settings.RATELIMIT_USE_CACHE = "fake-cache"
    (error,) = check_ratelimit_cache()
    assert error.id == "django_rl.E091"
    assert "'fake-cache'" in error.msg


def test_redis_down_denies_by_default(private_redis):
    private_redis.stop()

    @ratelimit(key="ip", rate="10/m", block=False)
    def view(request):
        return request.limited

    assert view(rf.post("/"))
    hit = partial(is_ratelimited, increment=True, key="ip", rate="1/m", group="a")
    assert hit(rf.get("/"))
    assert get_usage(rf.get("/"), increment=True, key="ip", rate="1/m", group="a") == {
        "count": 0,
        "limit": 0,
        "should_limit": True,
        "time_left": -1,
    }
    # A read sees a count of 0, as the original's failed cache read does.
    look = get_usage(rf.get("/"), key="ip", rate="1/m", group="a")
    assert (look["count"], look["limit"], look["should_limit"]) == (0, 1, False)


def test_redis_down_allows_with_fail_open(settings, private_redis):
    settings.RATELIMIT_FAIL_OPEN = True
    private_redis.stop()

    @ratelimit(key="ip", rate="1/m", block=False)
    def view(request):
        return request.limited

    assert not view(rf.get("/"))
    assert not view(rf.get("/"))
    assert get_usage(rf.get("/"), increment=True, key="ip", rate="1/m", group="a") is None


def test_drop_in_settings_leave_django_rl_alone(settings):
    """RATELIMIT_* affect only the drop-in: DJANGO_RL's FAIL_OPEN and keys stand."""
    from django_rl import get_policy

    settings.RATELIMIT_FAIL_OPEN = False
    settings.RATELIMIT_IPV4_MASK = 8
    policy = get_policy("per_minute")
    assert policy.fail_open is True
    assert policy.identify(rf.get("/", REMOTE_ADDR="10.1.2.3")) == "ip:10.1.2.3"


@pytest.mark.parametrize(
    ("setting", "mask", "first", "same", "other"),
    [
        ("RATELIMIT_IPV4_MASK", 32, "10.1.1.1", None, "10.1.1.2"),
        ("RATELIMIT_IPV6_MASK", 128, "2001:db8::1000", None, "2001:db8::1001"),
        ("RATELIMIT_IPV4_MASK", 16, "10.1.1.1", "10.1.0.1", "192.168.1.1"),
        ("RATELIMIT_IPV6_MASK", 64, "2001:db8::1000", "2001:db8::1001", "2001:db9::1000"),
    ],
)
def test_ip_masks(settings, setting, mask, first, same, other):
    setattr(settings, setting, mask)

    @ratelimit(rate="1/m", key="ip", block=False)
    def view(request):
        return request.limited

    assert not view(rf.get("/", REMOTE_ADDR=first))
    assert view(rf.get("/", REMOTE_ADDR=first))
    if same is not None:
        assert view(rf.get("/", REMOTE_ADDR=same))
    assert not view(rf.get("/", REMOTE_ADDR=other))


def test_get_ip_default():
    assert _get_ip(rf.get("/", REMOTE_ADDR="1.2.3.4")) == "1.2.3.4"
    assert _get_ip(rf.get("/", REMOTE_ADDR="2001:db8::1:2:3:4")) == "2001:db8::"


def test_get_ip_bad_meta_key(settings):
    settings.RATELIMIT_IP_META_KEY = "fake"
    with pytest.raises(ImproperlyConfigured):
        _get_ip(rf.get("/", REMOTE_ADDR="1.2.3.4"))


def test_get_ip_empty_remote_addr():
    with pytest.raises(ImproperlyConfigured):
        _get_ip(rf.get("/", REMOTE_ADDR=""))


@pytest.mark.parametrize(
    "meta_key",
    [
        "HTTP_X_CLIENT_IP",
        "tests.sites.views_contrib_ratelimit.my_ip",
        lambda request: request.META["MY_THING"],
    ],
)
def test_ip_meta_key(settings, meta_key):
    settings.RATELIMIT_IP_META_KEY = meta_key
    request = rf.get("/", REMOTE_ADDR="1.2.3.4", HTTP_X_CLIENT_IP="5.6.7.8", MY_THING="5.6.7.8")
    assert _get_ip(request) == "5.6.7.8"


# --- the admin and manage.py ratelimit see the drop-in's state --------------


def test_the_live_counters_list_and_reset_the_state(settings):
    from django_rl.inspection.listing import Query, list_counters
    from django_rl.policies.inline import policy_name
    from django_rl.policies.registry import policies_named, policy_names

    settings.ROOT_URLCONF = "tests.sites.urls_contrib_ratelimit"
    for _ in range(3):
        get_usage(rf.get("/"), group="admin-seen", key="ip", rate="2/m", increment=True)
    name = policy_name("admin-seen")
    assert name in policy_names()
    # The URLconf's views are known before any request.
    assert policy_name("tests.sites.views_contrib_ratelimit.blocked") in policy_names()
    assert (
        policy_name("tests.sites.views_contrib_ratelimit.ClassView.ClassView.get") in policy_names()
    )
    [row] = list_counters(Query(policy=name)).rows
    assert (row.identity, row.limit, row.used, row.rate, row.denied) == (
        "ip:127.0.0.1",
        2,
        3,
        "2/m",
        True,
    )
    assert sum(policy.reset("ip:127.0.0.1") for policy in policies_named(name)) == 1
    assert get_usage(rf.get("/"), group="admin-seen", key="ip", rate="2/m")["count"] == 0


def test_another_process_finds_the_rates_in_the_catalogue(settings):
    """A process that never decided (the admin's) reads the rate the deciding one recorded."""
    from django_rl.inspection.listing import Query, list_counters
    from django_rl.policies.inline import policy_name

    settings.ROOT_URLCONF = "tests.sites.urls_contrib_ratelimit"
    get_usage(
        rf.get("/"), group="tests.sites.views_contrib_ratelimit.blocked", key="ip", rate="7/h"
    )
    get_usage(
        rf.get("/"), group="tests.sites.views_contrib_ratelimit.blocked", key="ip", rate="7/h",
        increment=True,
    )  # fmt: skip
    store.forget_policies()  # as if this were another process
    [row] = list_counters(
        Query(policy=policy_name("tests.sites.views_contrib_ratelimit.blocked"))
    ).rows
    assert (row.rate, row.limit, row.used) == ("7/h", 7, 1)


@pytest.mark.parametrize(
    ("setting", "digest"),
    [
        (None, lambda text: __import__("hashlib").sha256(text).hexdigest()),
        ("hashlib.md5", lambda text: __import__("hashlib").md5(text).hexdigest()),
    ],
)
def test_values_clients_send_are_hashed_in_keys(settings, redis_client, setting, digest):
    """RATELIMIT_HASH_ALGORITHM: a username never stands in a Redis key; an address does."""
    # (an address or a user as django_rl's own identities name them)
    if setting is not None:
        settings.RATELIMIT_HASH_ALGORITHM = setting
    request = rf.post("/", {"username": "alice@example.com"})
    assert not is_ratelimited(request, group="h", key="post:username", rate="1/m", increment=True)
    assert is_ratelimited(request, group="h", key="post:username", rate="1/m", increment=True)
    is_ratelimited(request, group="h", key="ip", rate="1/m", increment=True)
    keys = sorted(k.decode() for k in redis_client.keys("rl:@h:*"))
    identities = sorted(key.split("{")[1].split("}")[0] for key in keys)
    assert identities == sorted(["ip:127.0.0.1", f"h:{digest(b'alice@example.com')}"])


def test_manage_py_ratelimit_lists_inspects_and_resets_the_state(settings):
    from django.core.management import call_command

    from django_rl.policies.inline import policy_name

    settings.ROOT_URLCONF = "tests.sites.urls_contrib_ratelimit"
    for _ in range(3):
        get_usage(rf.get("/"), group="cmd", key="ip", rate="2/m", increment=True)

    def run(*args: str) -> str:
        out = io.StringIO()
        call_command("ratelimit", *args, stdout=out)
        return out.getvalue()

    name = policy_name("cmd")
    [row] = [line for line in run("policies").splitlines() if line.startswith(f"{name} ")]
    assert re.split(r"\s{2,}", row.strip()) == [
        name, "fixed_window", "per rate", "2/m", "its own", "per rate",
    ]  # fmt: skip
    listed = [line for line in run("policies").splitlines() if line.startswith("@")]
    assert any(
        policy_name("tests.sites.views_contrib_ratelimit.blocked") in line for line in listed
    )
    assert "ip:127.0.0.1" in run("inspect", name, "ip:127.0.0.1")
    run("reset", name, "ip:127.0.0.1")
    assert get_usage(rf.get("/"), group="cmd", key="ip", rate="2/m")["count"] == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("target", "action", "rate", "expected"),
    [
        ("127.0.0.1", "exempt", "", [None, None, None]),
        ("127.0.0.1", "block", "", [(0, 2, True), (0, 2, True), (0, 2, True)]),
        ("127.0.0.0/24", "block", "", [(0, 2, True), (0, 2, True), (0, 2, True)]),
        ("127.0.0.1", "rate", "1/h", [(1, 1, False), (2, 1, True), (3, 1, True)]),
    ],
)
def test_overrides_set_in_the_admin_apply(target, action, rate, expected):
    """As to any policy: an exemption, a block, a rate of the drop-in's group and value."""
    import datetime

    from django.utils import timezone

    from django_rl.models import Override
    from django_rl.overrides import LOADER, normalize_target
    from django_rl.policies.inline import policy_name

    Override.objects.create(
        policy=policy_name("overridden"),
        identity=normalize_target(target),
        action=action,
        rate=rate,
        expires_at=timezone.now() + datetime.timedelta(seconds=600),
        reason="tests",
    )
    assert LOADER.load()
    usages = [
        get_usage(rf.get("/"), group="overridden", key="ip", rate="2/m", increment=True)
        for _ in range(3)
    ]
    answers = [None if u is None else (u["count"], u["limit"], u["should_limit"]) for u in usages]
    assert answers == expected
    if action == "block":
        assert 590 <= usages[0]["time_left"] <= 600
    other = get_usage(rf.get("/", REMOTE_ADDR="10.0.0.2"), group="overridden", key="ip", rate="2/m")
    assert (other["count"], other["limit"]) == (0, 2)  # another value: the call's own rate


def test_the_drop_in_may_replace_django_ratelimit_in_installed_apps(settings):
    """A project that replaces the name everywhere, INSTALLED_APPS included, still starts."""
    from django.apps import apps
    from django.core.checks import run_checks

    settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, "django_rl.contrib.ratelimit"]
    assert apps.get_app_config("ratelimit").name == "django_rl.contrib.ratelimit"
    assert [m for m in run_checks() if m.level >= 30] == []
