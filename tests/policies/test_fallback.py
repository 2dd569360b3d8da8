"""The outage fallback (``fallback_rate``): while Redis cannot answer, each process counts locally.

Against the suite's own redis-server, killed, paused, out of memory or
refusing a command: every algorithm with a ``fallback_rate`` admits exactly
the fallback allowance per identity and period in a process (one thread, 16
threads, and 3 processes: the site-wide bound), denials are 429 with the
local Retry-After and headers through both front doors, ``peek`` answers
from the same counts, memory stays bounded by ``FALLBACK_MAX_IDENTITIES``,
and decisions are Redis's again as soon as it answers.

The fallback's windows are aligned on this host's clock (``fallback.now_ms``):
tests that count against a real clock start with at least a minute left in
the fallback's hour; those that check Retry-After freeze the store's clock.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import re
import threading
import time
import tracemalloc

import pytest
from django.http import HttpResponse
from django.test import Client, RequestFactory

from django_rl import get_policy
from django_rl.backends import get_backend
from django_rl.checks.system import check_settings
from django_rl.decorators import ratelimit
from django_rl.policies.fallback import LocalFallback, get_fallback_store, now_ms
from tests.backends.test_error_replies import acl_user_without_scripting
from tests.backends.test_oom import fill_then_cap
from tests.conftest import point_caches_at
from tests.support import figures
from tests.support.redis_server import caches_for, free_port
from tests.support.workers import hit_through_an_outage

FALLBACK = 7
HOUR_MS = 3_600_000
POLICIES = {
    "fixed_window": {
        "algorithm": "fixed_window",
        "rate": "50/m",
        "key": "ip",
        "fallback_rate": "7/h",
    },
    "sliding_log": {
        "algorithm": "sliding_log",
        "rate": "50/m",
        "key": "ip",
        "fallback_rate": "7/h",
    },
    # The capacity does not apply to the fallback: a plain count per period.
    "token_bucket": {
        "algorithm": "token_bucket",
        "capacity": 50,
        "rate": "50/m",
        "key": "ip",
        "fallback_rate": "7/h",
    },
    # Nor does the burst.
    "gcra": {
        "algorithm": "gcra",
        "burst": 50,
        "rate": "50/m",
        "key": "ip",
        "fallback_rate": "7/h",
    },
    "sliding_window": {
        "algorithm": "sliding_window",
        "rate": "50/m",
        "key": "ip",
        "fallback_rate": "7/h",
    },
    "quota": {
        "algorithm": "quota",
        "limit": 50,
        "period": "day",
        "key": "ip",
        "fallback_rate": "7/h",
    },
    "plain": {"algorithm": "sliding_log", "rate": "5/m", "key": "ip"},
}
ALGORITHMS = ["fixed_window", "sliding_log", "token_bucket", "gcra", "sliding_window", "quota"]
SECTION = "outage fallback (fallback_rate)"


@pytest.fixture
def fresh_fallback_hour() -> None:
    """Wait, if need be, until at least a minute is left in the fallback's hour window."""
    left = HOUR_MS - now_ms() % HOUR_MS
    if left < 60_000:
        time.sleep(left / 1000 + 0.05)


@pytest.fixture
def dead_redis(settings):
    """Point CACHES at a port where nothing listens (short timeouts)."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    settings.CACHES = caches_for(url, SOCKET_CONNECT_TIMEOUT=0.2, SOCKET_TIMEOUT=0.2)
    return url


def seen(decisions) -> list[tuple[bool, int, int, bool, bool]]:
    return [(d.allowed, d.remaining, d.limit, d.degraded, d.fallback) for d in decisions]


def allowance(hits: int, limit: int = FALLBACK) -> list[tuple[bool, int, int, bool, bool]]:
    """Return what ``hits`` hits of cost 1 see from a fresh local count at ``limit``."""
    return [
        (True, limit - i - 1, limit, True, True) if i < limit else (False, 0, limit, True, True)
        for i in range(hits)
    ]


@pytest.mark.usefixtures("fresh_fallback_hour")
@pytest.mark.parametrize("name", ALGORITHMS)
def test_a_killed_redis_leaves_each_identity_exactly_the_fallback_allowance(
    settings, private_redis, name
):
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    policy = get_policy(name)
    assert seen([policy.hit("ip:192.0.2.1")]) == [(True, 49, 50, False, False)]
    private_redis.kill()
    first = [policy.hit("ip:192.0.2.1") for _ in range(9)]
    other = [policy.hit("ip:192.0.2.2") for _ in range(9)]
    assert seen(first) == seen(other) == allowance(9)
    denied = first[-1]
    # Retry-After and the reset are the end of the local window (the hour).
    assert 0 < denied.retry_after == denied.reset_after <= 3600
    assert denied.window == 3600
    # A policy without fallback_rate follows fail_open, as before.
    plain = get_policy("plain").hit("ip:192.0.2.1")
    assert seen([plain]) == [(True, 5, 5, True, False)]


@pytest.mark.usefixtures("fresh_fallback_hour")
@pytest.mark.parametrize("name", ALGORITHMS)
def test_sixteen_threads_through_a_killed_redis_admit_exactly_the_fallback_limit(
    settings, private_redis, name
):
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    policy = get_policy(name)
    assert not policy.hit("ip:192.0.2.9").degraded
    private_redis.kill()
    barrier = threading.Barrier(16)
    made: list[list] = [[] for _ in range(16)]

    def worker(index: int) -> None:
        barrier.wait()
        # Two identities, hit in turn by every thread.
        made[index] = [(i % 2, policy.hit(f"ip:192.0.2.{i % 2 + 1}")) for i in range(20)]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    decisions = [entry for per_thread in made for entry in per_thread]
    assert len(decisions) == 320
    assert all(d.degraded and d.fallback for _, d in decisions)
    assert [sum(d.allowed for who, d in decisions if who == i) for i in (0, 1)] == [7, 7]
    # Each allowed hit was told a distinct remaining count: no two threads
    # were let through on the same count.
    for i in (0, 1):
        remaining = sorted(d.remaining for who, d in decisions if who == i and d.allowed)
        assert remaining == list(range(7))
    assert [policy.peek(f"ip:192.0.2.{i}").remaining for i in (1, 2)] == [0, 0]


@pytest.mark.slow
@pytest.mark.usefixtures("fresh_fallback_hour")
def test_three_processes_admit_the_fallback_limit_each_the_site_wide_bound(dead_redis):
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    results = context.Queue()
    readies = [context.Event() for _ in range(3)]
    children = [
        context.Process(
            target=hit_through_an_outage,
            args=(dead_redis, POLICIES, "sliding_log", "ip:192.0.2.1", 20, ready, go, results),
        )
        for ready in readies
    ]
    for child in children:
        child.start()
    try:
        for ready in readies:
            assert ready.wait(60), "a child process did not start"
        go.set()
        counts = [results.get(timeout=60) for _ in children]
    finally:
        for child in children:
            child.join(30)
            if child.is_alive():
                child.kill()
    assert all(child.exitcode == 0 for child in children)
    # Each process its own allowance: the site admits fallback limit x processes.
    assert counts == [(FALLBACK, 20)] * 3


@pytest.mark.usefixtures("fresh_fallback_hour")
def test_peek_in_an_outage_answers_from_the_local_count(settings, dead_redis):
    settings.DJANGO_RL = {
        "POLICIES": {
            **POLICIES,
            "closed": {"algorithm": "fixed_window", "rate": "5/m", "key": "ip", "fail_open": False},
        }
    }
    policy = get_policy("sliding_log")
    assert seen([policy.peek("ip:192.0.2.1")]) == [(True, 7, 7, True, True)]
    assert policy.peek("ip:192.0.2.1").reset_after == 0.0  # nothing counted yet
    assert seen(policy.hit("ip:192.0.2.1") for _ in range(3)) == allowance(3)
    peeked = policy.peek("ip:192.0.2.1")
    assert seen([peeked]) == [(True, 4, 7, True, True)]
    assert peeked.retry_after == 0.0 and 0 < peeked.reset_after <= 3600
    assert seen(policy.hit("ip:192.0.2.1") for _ in range(4)) == allowance(7)[3:]
    exhausted = policy.peek("ip:192.0.2.1")
    assert seen([exhausted]) == [(False, 0, 7, True, True)]
    assert 0 < exhausted.retry_after <= 3600
    # Peeking counts nothing, and another identity has its whole allowance.
    assert seen([policy.peek("ip:192.0.2.2")]) == [(True, 7, 7, True, True)]
    # Without fallback_rate, peek follows fail_open instead of raising.
    opened, closed = get_policy("plain").peek("ip:1"), get_policy("closed").peek("ip:1")
    assert seen([opened, closed]) == [(True, 5, 5, True, False), (False, 0, 5, True, False)]
    assert (opened.retry_after, closed.retry_after) == (0.0, 1.0)


#: The frozen fallback clock of the HTTP tests: 42.6 s before the end of a minute.
FROZEN_MS = 1_800_000_000_000 - 1_800_000_000_000 % 60_000 + 17_400


@pytest.fixture
def http_outage(settings, dead_redis, monkeypatch):
    """The test views' policy with a fallback of 2/m, Redis dead, the fallback clock frozen."""
    settings.DJANGO_RL = {
        "POLICIES": {
            "per_minute": {
                "algorithm": "fixed_window",
                "rate": "5/m",
                "key": "ip",
                "fallback_rate": "2/m",
            }
        }
    }
    monkeypatch.setattr(get_fallback_store(), "clock", lambda: FROZEN_MS)


@pytest.mark.usefixtures("http_outage")
@pytest.mark.parametrize(
    "url", ["/limited/", "/limited-async/", "/class/", "/api/scoped/"], ids=str.strip
)
def test_fallback_denials_are_429_with_the_local_retry_after_and_headers(url):
    client = Client()
    responses = [client.get(url, REMOTE_ADDR="10.0.0.1") for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 429]
    assert responses[2]["Retry-After"] == "43"  # 42.6 s left in the local window
    assert [r["RateLimit-Policy"] for r in responses] == ['"per_minute";q=2;w=60'] * 3
    assert [r["RateLimit"] for r in responses] == [
        '"per_minute";r=1;t=43',
        '"per_minute";r=0;t=43',
        '"per_minute";r=0;t=43',
    ]
    assert "Retry-After" not in responses[0]


@pytest.mark.usefixtures("http_outage")
def test_legacy_headers_describe_the_fallback_limit(settings):
    settings.DJANGO_RL = {**settings.DJANGO_RL, "HEADERS": "legacy"}
    get_fallback_store().clock = lambda: FROZEN_MS
    response = Client().get("/limited/", REMOTE_ADDR="10.0.0.3")
    assert (response.status_code, response["X-RateLimit-Limit"]) == (200, "2")
    assert response["X-RateLimit-Remaining"] == "1"


def test_an_acl_that_refuses_scripts_leaves_the_scripted_policy_to_the_fallback(
    settings, private_redis, caplog, fresh_fallback_hour
):
    caplog.set_level(logging.INFO, logger="django_rl")
    url = acl_user_without_scripting(private_redis)
    settings.CACHES = caches_for(url, SOCKET_CONNECT_TIMEOUT=2, SOCKET_TIMEOUT=2)
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    log, window = get_policy("sliding_log"), get_policy("fixed_window")
    backend = get_backend("default")
    connection = backend.client.client_id()
    # The fixed window's MULTI/EXEC needs no script: Redis counts it.
    assert seen(window.hit("ip:1") for _ in range(2)) == [
        (True, 49, 50, False, False),
        (True, 48, 50, False, False),
    ]
    assert seen(log.hit("ip:1") for _ in range(9)) == allowance(9)
    assert seen([log.peek("ip:1")]) == [(False, 0, 7, True, True)]
    ((level, message),) = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert level == "ERROR"
    assert re.fullmatch(
        r"Redis for rate limiting \(CACHES\['default'\]\) refuses a command to this "
        r"connection's ACL user \(NoPermissionError: .*'evalsha'.*\); decisions it cannot "
        r"answer are made in each process at the fallback_rate of policies 'fixed_window', "
        r"'gcra', 'quota', 'sliding_log', 'sliding_window', 'token_bucket', the others follow "
        r"fail_open, and each asks it again\. "
        r".*",
        message,
    )
    assert (backend.health.outages, backend.client.client_id()) == (0, connection)


@pytest.mark.slow
@pytest.mark.usefixtures("fresh_fallback_hour")
def test_at_maxmemory_the_fallback_decides_until_memory_frees(settings, private_redis):
    point_caches_at(settings, private_redis, 2.0)
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    policy = get_policy("fixed_window")
    assert seen([policy.hit("ip:1")]) == [(True, 49, 50, False, False)]
    admin = private_redis.client()
    try:
        fill_then_cap(admin)
        during = [policy.hit("ip:1") for _ in range(9)]
        admin.config_set("maxmemory", 0)
        after = policy.hit("ip:1")
    finally:
        admin.close()
    assert seen(during) == allowance(9)
    # Redis answers again: its own count goes on (the local one is not written back).
    assert seen([after]) == [(True, 48, 50, False, False)]
    assert get_backend("default").health.outages == 0


@pytest.mark.usefixtures("fresh_fallback_hour")
def test_decisions_are_redis_backed_again_as_soon_as_it_answers(settings, private_redis, caplog):
    caplog.set_level(logging.INFO, logger="django_rl")
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    policy = get_policy("sliding_log")
    assert seen(policy.hit("ip:1") for _ in range(2))[-1] == (True, 48, 50, False, False)
    store = get_fallback_store()
    admin = private_redis.client()
    try:
        admin.save()  # the restarted server loads the two hits back
    finally:
        admin.close()
    private_redis.kill()
    during = [policy.hit("ip:1") for _ in range(8)]
    in_outage = store.status()
    private_redis.start(port=private_redis.port)
    back = policy.hit("ip:1")
    assert seen(during) == allowance(8)
    # The first decision after Redis answers is Redis's, counted on what it had.
    assert seen([back]) == [(True, 47, 50, False, False)]
    assert seen([policy.peek("ip:1")]) == [(True, 47, 50, False, False)]
    # The process says when it decided locally, and that it no longer does.
    assert in_outage.current is not None and in_outage.current.until is None
    assert (in_outage.current.decisions, in_outage.current.policies) == (8, ("sliding_log",))
    after = store.status()
    assert after.current is None and after.previous is not None
    assert (after.previous.decisions, after.previous.policies) == (8, ("sliding_log",))
    assert after.previous.since <= after.previous.last <= after.previous.until
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "django_rl"]
    assert [level for level, _ in lines] == ["WARNING", "INFO"]
    assert re.fullmatch(
        r"Redis for rate limiting \(CACHES\['default'\]\) is unavailable \(ConnectionError: .*\); "
        r"policies 'fixed_window', 'gcra', 'quota', 'sliding_log', 'sliding_window', "
        r"'token_bucket' "
        r"decide in each process at "
        r"their fallback_rate, the other decisions follow fail_open \(default FAIL_OPEN\) "
        r"until it answers again\.",
        lines[0][1],
    )


def test_reset_forgets_the_local_count_even_while_redis_is_down(settings, dead_redis):
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    policy = get_policy("token_bucket")
    assert [policy.hit("ip:1").allowed for _ in range(8)] == [True] * 7 + [False]
    with pytest.raises(Exception, match="could not reset"):
        policy.reset("ip:1")
    assert seen([policy.hit("ip:1")]) == allowance(1)


def test_a_per_plan_policy_falls_back_to_its_one_static_rate(settings, dead_redis):
    from django.test import RequestFactory

    settings.DJANGO_RL = {
        "POLICIES": {
            "plans": {
                "algorithm": "fixed_window",
                "rate": "tests.support.plans.from_header",
                "key": "ip",
                "fallback_rate": "3/h",
            }
        }
    }
    policy = get_policy("plans")
    free = RequestFactory().get("/", HTTP_X_RATE="2/h")
    pro = RequestFactory().get("/", HTTP_X_RATE="4/h")
    # Whatever each request's plan, one count per identity at the fallback rate.
    mixed = [policy.hit("ip:1", request=r) for r in (free, pro, free, pro)]
    assert seen(mixed) == allowance(4, limit=3)


def test_hostile_identities_evict_the_one_hit_longest_ago(settings, dead_redis):
    settings.DJANGO_RL = {"FALLBACK_MAX_IDENTITIES": 3, "POLICIES": POLICIES}
    policy = get_policy("sliding_log")
    store = get_fallback_store()
    assert [policy.hit("ip:a").allowed for _ in range(8)] == [True] * 7 + [False]
    policy.hit("ip:b")
    policy.hit("ip:c")
    assert not policy.hit("ip:a").allowed  # a is now the one hit last
    policy.hit("ip:d")  # evicts b, the one hit longest ago
    assert (len(store), store.evicted) == (3, 1)
    assert seen([policy.hit("ip:b")]) == allowance(1)  # b starts again (evicting c)
    assert seen([policy.hit("ip:a")]) == [(False, 0, 7, True, True)]  # a was kept
    assert (len(store), store.evicted) == (3, 2)


#: The audit's two policies: a login form limited by address, an API by a
#: key the client chooses (and so can mint by the thousand).
CROSS_POLICIES = {
    "login": {"algorithm": "fixed_window", "rate": "5/m", "key": "ip", "fallback_rate": "1/m"},
    "api": {
        "algorithm": "fixed_window",
        "rate": "100/m",
        "key": "header:X-Api-Key",
        "fallback_rate": "100/m",
    },
}


def test_one_policys_minted_identities_never_evict_another_policys_counts(settings, private_redis):
    settings.DJANGO_RL = {"POLICIES": CROSS_POLICIES}  # FALLBACK_MAX_IDENTITIES: the default
    # The store's clock frozen at the start of a minute: every local count
    # below is in one window, however slow the machine.
    get_fallback_store().clock = lambda: FROZEN_MS - FROZEN_MS % 60_000
    login = ratelimit("login")(ok_view)
    api = ratelimit("api")(ok_view)
    factory = RequestFactory()

    def attempt() -> int:
        return login(factory.post("/login", REMOTE_ADDR="203.0.113.7")).status_code

    assert not get_policy("login").hit("ip:192.0.2.99").degraded  # Redis answers, then:
    private_redis.kill()
    answers = [attempt()]
    for round_ in range(3):
        # More fresh API keys than FALLBACK_MAX_IDENTITIES between attempts.
        for i in range(10_001):
            api(factory.get("/api", REMOTE_ADDR="203.0.113.7", HTTP_X_API_KEY=f"{round_}-{i}"))
        answers.append(attempt())
    assert answers == [200, 429, 429, 429]  # the bound: 1 a minute, whatever the API saw
    store = get_fallback_store()
    assert (store.held("login"), store.held("api")) == (1, 10_000)
    assert store.evicted == 3 * 10_001 - 10_000
    status = store.status()
    assert (status.identities, status.max_identities, status.policies) == (10_001, 10_000, 2)


def ok_view(request):
    return HttpResponse("ok")


#: The longest key an entry can have: the longest canonical rate, an identity
#: of 100 (longer ones become a digest); the policy's name is its table's.
LONGEST_RATE = "1000000000/366d"
#: The documented bound (docs/reliability.md): bytes per identity, worst case.
BYTES_PER_IDENTITY = 400
#: Policies with a fallback_rate in the memory test: each has its own bound.
MEASURED_POLICIES = 3


def test_each_policys_identities_are_bounded_and_memory_is_per_identity(request, settings):
    store = get_fallback_store()
    assert store.max_identities == 10_000  # the default
    # Names of 64 characters, the longest a policy may have.
    fallbacks = [LocalFallback(f"{n}" * 64, LONGEST_RATE, store) for n in range(MEASURED_POLICIES)]

    def identity(i: int) -> str:
        return f"{i:0100d}"  # 100 characters: kept verbatim

    assert len(fallbacks[0].key(identity(0))) == 15 + 1 + 100
    for fallback in fallbacks:
        for i in range(30_000):
            fallback.hit(identity(i))
    held = [store.held(f.policy) for f in fallbacks]
    assert (held, store.evicted) == ([10_000] * MEASURED_POLICIES, 20_000 * MEASURED_POLICIES)
    # Every count held now is replaced under tracemalloc: what it then holds
    # is all of the store's memory (keys, counts, the tables, which the churn
    # reallocates: a dict compacts once its deleted slots run out).
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for fallback in fallbacks:
            for i in range(30_000, 40_000):
                fallback.hit(identity(i))
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert (len(store), store.evicted) == (30_000, 30_000 * MEASURED_POLICIES)
    per_identity = used / len(store)
    figures.record(
        request.config,
        SECTION,
        f"{MEASURED_POLICIES} policies, 30,000 distinct identities each, "
        f"FALLBACK_MAX_IDENTITIES 10,000: {len(store):,} held, {used:,} bytes, "
        f"{per_identity:,.0f} bytes per identity (keys of "
        f"{len(fallbacks[0].key(identity(0)))} characters, the longest)",
    )
    assert per_identity <= BYTES_PER_IDENTITY


@pytest.mark.parametrize(
    ("rate", "message"),
    [
        ("5/mango", "rate '5/mango' has an unknown period unit 'mango'"),
        (
            "0/m",
            "fallback_rate '0/m' would deny every request while Redis cannot answer: "
            "that is fail_open False",
        ),
        (5, "rate must be a string such as '5/m', not 5"),
        ("tests.support.plans.from_header", "it is a rate function"),
    ],
)
def test_a_malformed_fallback_rate_is_a_check_error(settings, rate, message):
    settings.ROOT_URLCONF = "tests.sites.urls_without_limits"
    settings.DJANGO_RL = {
        "POLICIES": {"p": {"algorithm": "fixed_window", "rate": "5/m", "fallback_rate": rate}}
    }
    ((error,),) = [check_settings()]
    assert error.id == "django_rl.E031"
    assert error.msg.startswith(f"DJANGO_RL['POLICIES']['p']['fallback_rate']: {message}")


BUCKET = {"algorithm": "token_bucket", "capacity": 50, "rate": "1/s"}
WINDOW = {"algorithm": "fixed_window", "rate": "5/m"}


@pytest.mark.parametrize(
    ("spec", "warned"),
    [
        ({**WINDOW, "fallback_rate": "6/m"}, True),
        ({"algorithm": "sliding_log", "rate": "5/m", "fallback_rate": "1/s"}, True),
        ({**BUCKET, "fallback_rate": "2/s"}, True),
        ({**WINDOW, "fallback_rate": "5/m"}, False),
        ({**WINDOW, "fallback_rate": "300/h"}, False),
        # The bucket's capacity does not count: its rate does.
        ({**BUCKET, "fallback_rate": "9/10s"}, False),
        # Per-plan rates are known per request: not judged.
        ({**WINDOW, "rate": "tests.support.plans.from_header", "fallback_rate": "9/s"}, False),
    ],
)
def test_a_fallback_looser_than_the_policy_is_a_warning(settings, spec, warned):
    settings.ROOT_URLCONF = "tests.sites.urls_without_limits"
    settings.DJANGO_RL = {"POLICIES": {"p": spec}}
    found = check_settings()
    assert [m.id for m in found] == (["django_rl.W021"] if warned else [])


@pytest.mark.parametrize("size", [0, -1, 1_000_001, 2.5, True, "10"])
def test_fallback_max_identities_out_of_range_is_a_check_error(settings, size):
    settings.ROOT_URLCONF = "tests.sites.urls_without_limits"
    settings.DJANGO_RL = {"FALLBACK_MAX_IDENTITIES": size}
    ((error,),) = [check_settings()]
    assert error.id == "django_rl.E042"


FAULT_POLICIES = {
    "per_minute": {
        "algorithm": "fixed_window",
        "rate": "50/m",
        "key": "ip",
        "fallback_rate": "3/h",
    },
    "log": {"algorithm": "sliding_log", "rate": "50/m", "key": "ip", "fallback_rate": "3/h"},
    "bucket": {
        "algorithm": "token_bucket",
        "capacity": 50,
        "rate": "50/m",
        "key": "ip",
        "fallback_rate": "3/h",
    },
}
#: The views of tests/sites/urls_faults.py, and the policy of each.
FAULT_URLS = {
    "/window/": "per_minute",
    "/window-async/": "per_minute",
    "/window-class/": "per_minute",
    "/api/window/": "per_minute",
    "/log/": "log",
    "/api/log/": "log",
    "/bucket/": "bucket",
    "/api/bucket/": "bucket",
}


@pytest.mark.slow
@pytest.mark.faults
@pytest.mark.usefixtures("fresh_fallback_hour")
@pytest.mark.parametrize("fault", ["SIGKILL", "SIGSTOP"])
def test_traffic_through_a_fault_gets_at_most_the_fallback_allowance(
    request, settings, private_redis, caplog, fault
):
    """Six threads, one client address each, round the fault suite's views (both front doors)."""
    caplog.set_level(logging.INFO, logger="django_rl")
    settings.ROOT_URLCONF = "tests.sites.urls_faults"
    settings.DJANGO_RL = {"POLICIES": FAULT_POLICIES}
    stop = threading.Event()
    answers: list[list[tuple[str, int, str]]] = [[] for _ in range(6)]

    def traffic(index: int) -> None:
        client = Client(raise_request_exception=False)  # a crash is a 500, counted
        urls = list(FAULT_URLS)
        sent = 0
        while not stop.is_set():
            url = urls[(sent + index) % len(urls)]
            response = client.get(url, REMOTE_ADDR=f"10.7.{index}.1")
            answers[index].append((url, response.status_code, response["RateLimit-Policy"]))
            sent += 1

    threads = [threading.Thread(target=traffic, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.3)
        if fault == "SIGKILL":
            private_redis.kill()
            time.sleep(1.0)
            private_redis.start(port=private_redis.port)
        else:
            private_redis.pause()
            time.sleep(1.0)
            private_redis.resume()
        time.sleep(0.5)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    statuses = {status for per_thread in answers for _, status, _ in per_thread}
    local: dict[tuple[str, int], list[int]] = {}
    for index, per_thread in enumerate(answers):
        for url, status, policy_header in per_thread:
            if ";q=3;" in policy_header:  # the fallback's limit: decided in this process
                local.setdefault((FAULT_URLS[url], index), []).append(status)
    allowed = {pair: seen.count(200) for pair, seen in local.items()}
    figures.record(
        request.config,
        SECTION,
        f"{fault}: {sum(map(len, answers)):,} requests, {sum(map(len, local.values())):,} "
        f"decided locally, {sum(allowed.values())} of them allowed over {len(allowed)} "
        f"(policy, client) pairs (at most 3 each); statuses {sorted(statuses)}",
    )
    assert statuses <= {200, 429}  # zero 500s
    assert local, "the fault must have made local decisions"
    # The site-wide bound of one process: the fallback allowance per client.
    assert max(allowed.values()) <= 3
    # Redis decides again: a fresh client gets the policy's own limit.
    probe = Client().get("/log/", REMOTE_ADDR="10.8.0.1")
    assert (probe.status_code, probe["RateLimit-Policy"]) == (200, '"log";q=50;w=60')
    outages = get_backend("default").health.outages
    levels = [r.levelname for r in caplog.records if r.name == "django_rl"]
    assert outages >= 1 and levels == ["WARNING", "INFO"] * outages
