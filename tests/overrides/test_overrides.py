"""Overrides in one process: what each does at every front door, and what a decision costs.

Overrides are loaded by hand here (``LOADER.load()``, the loader thread's own
load, in the test's transaction); the thread itself, propagation between
processes and Redis restarts are in test_overrides_processes.py.

The views' policy ``per_minute`` runs at 3 an hour here (tests start a
minute or more before the hour ends on the Redis clock), so no window ends
during a test.
"""

from __future__ import annotations

import datetime
import logging
import math
import time

import pytest
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_rl import Decision, get_policy
from django_rl.models import Override
from django_rl.overrides import LOADER, normalize_target
from django_rl.overrides.loader import marker_key
from django_rl.overrides.rules import MAX_BLOCK_RETRY_AFTER, TargetError
from tests.conftest import start_of_fresh_window
from tests.support.counting import CountingConnection
from tests.support.redis_server import caches_for
from tests.support.sf_headers import policies

pytestmark = pytest.mark.django_db

POLICIES = {
    "per_minute": {"algorithm": "fixed_window", "rate": "3/h", "key": "ip"},
    "other": {"algorithm": "fixed_window", "rate": "3/h", "key": "ip"},
    "bucket": {"algorithm": "token_bucket", "capacity": 3, "rate": "3/h", "key": "user_or_ip"},
    # Never denied in a test: every hit goes to Redis (no deny cache answers).
    "big": {"algorithm": "fixed_window", "rate": "1000/h", "key": "ip"},
    "big_plain": {"algorithm": "fixed_window", "rate": "1000/h", "key": "ip"},
}
#: The same views through each front door: the decorator (sync, async) and DRF's throttle.
URLS = ["/limited/", "/limited-async/", "/api/scoped/"]


@pytest.fixture(autouse=True)
def _policies(settings, redis_client):
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=60_000)


def override(policy, identity, action, rate="", seconds=600.0):
    """Save an override as the admin would, expiring ``seconds`` from now."""
    return Override.objects.create(
        policy=policy,
        identity=normalize_target(identity),
        action=action,
        rate=rate,
        expires_at=timezone.now() + datetime.timedelta(seconds=seconds),
        reason="tests",
    )


def load():
    assert LOADER.load()


def ours(caplog):
    """Return (level, message) of the lines logged on ``django_rl``."""
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "django_rl"]


def statuses(url, address, n):
    client = Client(REMOTE_ADDR=address)
    return [client.get(url).status_code for _ in range(n)]


# Targets


@pytest.mark.parametrize(
    ("typed", "stored"),
    [
        ("user:42", "user:42"),
        ("  user:42 ", "user:42"),
        ("ip:203.0.113.9", "ip:203.0.113.9"),
        ("203.0.113.9", "ip:203.0.113.9"),
        ("ip:2001:db8:1:2::5", "ip:2001:db8:1:2::"),  # an IPv6 client counts as its /64
        ("ip:::ffff:203.0.113.9", "ip:203.0.113.9"),  # as a request from that address is
        ("203.0.113.77/24", "ip:203.0.113.0/24"),
        ("ip:10.0.0.0/8", "ip:10.0.0.0/8"),
        ("2001:db8::/32", "ip:2001:db8::/32"),
        ("ip:unknown", "ip:unknown"),
        ("x-api-key:Bearer abc", "x-api-key:~9453d8c50e8dc48e0660a110"),
        ("x-api-key:~9453d8c50e8dc48e0660a110", "x-api-key:~9453d8c50e8dc48e0660a110"),
    ],
)
def test_targets_are_stored_as_decisions_compare_them(typed, stored):
    assert normalize_target(typed) == stored


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        ("", "name an identity (such as user:42) or an address network"),
        ("ip:10.0.0.0/33", "'ip:10.0.0.0/33' is not an address network such as 203.0.113.0/24 "
         "or 2001:db8::/48"),
        ("2001:db8::/96", "'2001:db8::/96': IPv6 clients are counted by their /64 network, so "
         "an override can name networks of at most /64"),
        ("ip:nowhere", "'ip:nowhere': ip: must be followed by an IPv4 or IPv6 address"),
    ],
)  # fmt: skip
def test_targets_that_name_nothing_are_refused(typed, message):
    with pytest.raises(TargetError) as raised:
        normalize_target(typed)
    assert str(raised.value) == message


# What each override does, at every front door


@pytest.mark.parametrize("url", URLS)
@pytest.mark.parametrize(("rate", "allowed"), [("5/h", 5), ("1/h", 1)])
def test_a_rate_override_changes_one_identitys_limit(url, rate, allowed):
    override("per_minute", "ip:10.0.0.1", "rate", rate)
    load()
    assert statuses(url, "10.0.0.1", allowed + 1) == [200] * allowed + [429]
    assert statuses(url, "10.0.0.2", 4) == [200, 200, 200, 429]
    response = Client(REMOTE_ADDR="10.0.0.3").get(url)
    assert policies(response) == {"per_minute": {"q": 3, "w": 3600}}
    response = Client(REMOTE_ADDR="10.0.0.1").get(url)
    assert policies(response) == {"per_minute": {"q": allowed, "w": 3600}}


@pytest.mark.parametrize("url", URLS)
def test_an_exempt_identity_is_not_limited_and_costs_no_redis_call(url, redis_client):
    override("per_minute", "ip:10.0.0.1", "exempt")
    load()
    responses = [Client(REMOTE_ADDR="10.0.0.1").get(url) for _ in range(5)]
    assert [r.status_code for r in responses] == [200] * 5
    # No limit applies: no Decision, so no rate-limit headers.
    assert [("RateLimit" in r, "RateLimit-Policy" in r) for r in responses] == [(False, False)] * 5
    assert redis_client.keys("*") == []
    assert get_policy("per_minute").hit("ip:10.0.0.1") == Decision(
        True, 0, 0, 0.0, 0.0, "per_minute"
    )
    assert statuses(url, "10.0.0.2", 4) == [200, 200, 200, 429]


@pytest.mark.parametrize("url", URLS)
def test_a_blocked_identity_is_denied_until_the_override_expires(url, redis_client):
    expires = override("per_minute", "ip:10.0.0.1", "block", seconds=600.5).expires_at.timestamp()
    load()
    before = time.time()
    response = Client(REMOTE_ADDR="10.0.0.1").get(url)
    after = time.time()
    assert response.status_code == 429
    # The time left until the override expires, rounded up as Retry-After is.
    assert int(response["Retry-After"]) in {math.ceil(expires - after), math.ceil(expires - before)}
    assert redis_client.keys("*") == []
    assert statuses(url, "10.0.0.2", 4) == [200, 200, 200, 429]


def test_a_blocks_retry_after_is_at_most_an_hour():
    override("per_minute", "ip:10.0.0.1", "block", seconds=7 * 86_400)
    load()
    response = Client(REMOTE_ADDR="10.0.0.1").get("/limited/")
    assert (response.status_code, response["Retry-After"]) == (429, "3600")
    decision = get_policy("per_minute").hit("ip:10.0.0.1")
    assert decision == Decision(False, 3, 0, 3600.0, 3600.0, "per_minute", False, 3600)
    assert MAX_BLOCK_RETRY_AFTER == 3600.0


def test_networks_and_identities_most_specific_first():
    override("per_minute", "10.0.0.0/8", "block")
    override("per_minute", "10.1.0.0/16", "exempt")
    override("per_minute", "ip:10.1.2.3", "rate", "5/h")
    override("per_minute", "2001:db8::/32", "block")
    load()
    assert statuses("/limited/", "10.9.9.9", 1) == [429]
    assert statuses("/limited/", "10.1.9.9", 5) == [200] * 5
    assert statuses("/limited/", "10.1.2.3", 6) == [200] * 5 + [429]
    assert statuses("/limited/", "11.0.0.1", 4) == [200, 200, 200, 429]
    assert statuses("/limited/", "2001:db8:1:2::5", 1) == [429]
    assert statuses("/limited/", "2001:db9::1", 4) == [200, 200, 200, 429]


def test_a_digested_identity_matches_its_raw_value_not_its_digests_text():
    override("per_minute", "x-api-key:Bearer abc", "block")
    load()
    assert set(LOADER.rules["per_minute"].exact) == {"x-api-key:~9453d8c50e8dc48e0660a110"}
    policy = get_policy("per_minute")
    assert policy.hit("x-api-key:Bearer abc").allowed is False
    # A client that sends the digest's text is another client, digested in turn.
    assert policy.hit("x-api-key:~9453d8c50e8dc48e0660a110").allowed is True


def test_an_override_is_for_its_policy_only():
    override("other", "ip:10.0.0.1", "exempt")
    load()
    assert statuses("/limited/", "10.0.0.1", 4) == [200, 200, 200, 429]
    assert get_policy("other").hit("ip:10.0.0.1").limit == 0


def test_an_override_ends_when_it_expires_and_expired_ones_are_not_loaded():
    override("per_minute", "ip:10.0.0.1", "exempt", seconds=1.5)
    override("per_minute", "ip:10.0.0.9", "block", seconds=-1)
    load()
    assert set(LOADER.rules["per_minute"].exact) == {"ip:10.0.0.1"}
    assert statuses("/limited/", "10.0.0.1", 4) == [200] * 4
    assert statuses("/limited/", "10.0.0.9", 4) == [200, 200, 200, 429]
    time.sleep(1.6)
    # Expired: the policy counts again, from zero (the exempt requests were never counted).
    assert statuses("/limited/", "10.0.0.1", 4) == [200, 200, 200, 429]


def test_a_rate_override_keeps_its_own_state_and_peek_and_reset_see_it(redis_client):
    bucket = get_policy("bucket")
    assert [bucket.hit("user:7").allowed for _ in range(4)] == [True] * 3 + [False]
    override("bucket", "user:7", "rate", "5/h")
    load()
    # A state of its own: a full bucket. Its capacity (3) stays: a rate
    # override changes the rate at which a token bucket refills.
    assert [bucket.hit("user:7").allowed for _ in range(4)] == [True] * 3 + [False]
    assert bucket.peek("user:7").limit == 3
    override("per_minute", "ip:10.0.0.1", "rate", "5/h")
    load()
    fixed = get_policy("per_minute")
    assert [fixed.hit("ip:10.0.0.1").allowed for _ in range(4)] == [True] * 4
    assert fixed.peek("ip:10.0.0.1").remaining == 1
    assert [v.rate for v in fixed.variants()] == ["3/h", "5/h"]
    assert fixed.reset("ip:10.0.0.1") == 1
    assert fixed.peek("ip:10.0.0.1").remaining == 5
    assert redis_client.keys("rl:per_minute:*") == []


def test_peek_says_what_a_hit_would_be_told():
    override("per_minute", "ip:10.0.0.1", "exempt")
    override("per_minute", "ip:10.0.0.2", "block", seconds=7200)
    load()
    policy = get_policy("per_minute")
    assert policy.peek("ip:10.0.0.1") == Decision(True, 0, 0, 0.0, 0.0, "per_minute")
    assert policy.peek("ip:10.0.0.2") == Decision(
        False, 3, 0, 3600.0, 3600.0, "per_minute", False, 3600
    )


@pytest.mark.urls("tests.sites.urls_inline")
def test_inline_and_per_plan_policies_take_overrides(django_user_model):
    from tests.support import plans

    override("@tests.sites.views_inline.inline_view", "ip:10.0.0.1", "block")
    override("@tests.sites.views_inline.plan_view", "user:1", "rate", "6/h")
    load()
    assert statuses("/inline/", "10.0.0.1", 1) == [429]
    assert statuses("/inline/", "10.0.0.2", 4) == [200, 200, 200, 429]
    alice = django_user_model.objects.create_user("alice", password="pw", pk=1)
    bob = django_user_model.objects.create_user("bob", password="pw", pk=2)
    plans.PLAN_OF.clear()
    for user, limit in ((alice, 6), (bob, 2)):
        client = Client()
        client.force_login(user)
        said = [client.get("/plan/").json()["limited"] for _ in range(limit + 1)]
        assert said == [False] * limit + [True]


# What a decision costs


def command_calls(client):
    stats = client.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}


def test_overrides_add_no_database_query_and_no_round_trip(redis_server, redis_client):
    """A decision reads overrides from memory: 0 queries, and one send per counted decision."""
    for i in range(100):
        override("big", f"user:{i}", "block")
    override("big", "192.0.2.0/24", "exempt")
    override("big", "ip:10.0.0.1", "rate", "2000/h")
    override("big", "ip:10.0.0.2", "block")
    override("big", "ip:10.0.0.3", "exempt")
    # A URL of its own: django-redis keeps one pool per URL for the whole process.
    url = f"{redis_server.url}?client_name=overrides_counting"
    counting = {"connection_class": CountingConnection}
    with override_settings(CACHES=caches_for(url, CONNECTION_POOL_KWARGS=counting)):
        load()
        overridden, plain = get_policy("big"), get_policy("big_plain")
        for policy in (overridden, plain):
            policy.hit("ip:10.9.0.0")  # connect, measure the clock
        counted: dict[str, dict[str, object]] = {"big": {}, "big_plain": {}}
        with CaptureQueriesContext(connection) as queries:
            for policy, identity in [
                (overridden, "ip:10.0.0.1"),  # decided at the override's rate
                (overridden, "ip:10.9.0.1"),  # no override matches
                (plain, "ip:10.9.0.1"),  # a policy without overrides
            ]:
                before, sends = command_calls(redis_client), CountingConnection.sends
                decisions = [policy.hit(identity) for _ in range(10)]
                after = command_calls(redis_client)
                counted[policy.name][identity] = (
                    CountingConnection.sends - sends,
                    {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)},
                    {d.limit for d in decisions},
                )
            sends = CountingConnection.sends
            blocked = [overridden.hit("ip:10.0.0.2").allowed for _ in range(10)]
            exempt = [overridden.hit("ip:10.0.0.3").allowed for _ in range(10)]
            answered_locally = CountingConnection.sends - sends
    assert len(queries.captured_queries) == 0
    # INFO: the question before, counted in the answer after.
    ten = {"multi": 10, "incrby": 10, "pexpireat": 10, "pttl": 10, "exec": 10, "info": 1}
    assert counted == {
        "big": {"ip:10.0.0.1": (10, ten, {2000}), "ip:10.9.0.1": (10, ten, {1000})},
        "big_plain": {"ip:10.9.0.1": (10, ten, {1000})},
    }
    assert (blocked, exempt, answered_locally) == ([False] * 10, [True] * 10, 0)


# Loading


def test_a_missing_table_means_no_overrides_one_warning_and_decisions_as_usual(caplog):
    with connection.cursor() as cursor:  # undone with the test's transaction
        cursor.execute("ALTER TABLE django_rl_override RENAME TO unmigrated")
    caplog.set_level(logging.DEBUG, logger="django_rl")
    assert (LOADER.load(), LOADER.load(), LOADER.rules) == (False, False, {})
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "django_rl"]
    assert [r.getMessage() for r in warnings] == [
        "Rate-limit overrides could not be loaded from the database (OperationalError: no "
        "such table: django_rl_override). This process applies none until they can be, and "
        "tries again every 30 s; decisions go on. If the table is missing, run `manage.py "
        "migrate django_rl`; to turn overrides off, set DJANGO_RL['OVERRIDES'] = False."
    ]
    assert statuses("/limited/", "10.0.0.1", 4) == [200, 200, 200, 429]
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE unmigrated RENAME TO django_rl_override")
    caplog.clear()
    override("per_minute", "ip:10.0.0.2", "block")
    load()
    assert ours(caplog) == [
        ("INFO", "Rate-limit overrides load from the database again: 1 in force.")
    ]
    assert statuses("/limited/", "10.0.0.2", 1) == [429]


def test_while_the_database_cannot_be_read_the_last_overrides_stay():
    override("per_minute", "ip:10.0.0.1", "block")
    load()
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE django_rl_override RENAME TO unmigrated")
    assert LOADER.load() is False
    assert statuses("/limited/", "10.0.0.1", 1) == [429]


def test_a_rate_the_policy_cannot_take_leaves_the_policys_own_and_logs_once(caplog):
    override("per_minute", "ip:10.0.0.1", "rate", "5/fortnight")  # past the admin's form
    load()
    assert statuses("/limited/", "10.0.0.1", 4) == [200, 200, 200, 429]
    assert ours(caplog) == [
        (
            "ERROR",
            "A rate override of rate-limit policy 'per_minute' at '5/fortnight' cannot apply "
            "(rate '5/fortnight' has an unknown period unit 'fortnight'; use s, sec, second, "
            "m, min, minute, h, hour, d, day, w, week (plurals too), or no unit for seconds "
            "('100/10')); the policy's own rate decides instead. Change the override in the "
            "admin.",
        )
    ]


def test_overrides_can_be_turned_off(settings):
    override("per_minute", "ip:10.0.0.1", "block")
    load()
    settings.DJANGO_RL = {"POLICIES": POLICIES, "OVERRIDES": False}
    assert statuses("/limited/", "10.0.0.1", 4) == [200, 200, 200, 429]
    assert LOADER.rules == {}


def test_a_saved_or_deleted_override_writes_a_new_marker_once_committed(
    redis_client, django_capture_on_commit_callbacks
):
    key = marker_key("rl")
    with django_capture_on_commit_callbacks() as callbacks:
        override("per_minute", "ip:10.0.0.1", "block")
    assert (redis_client.get(key), len(callbacks)) == (None, 1)  # not before the commit
    tokens = []
    with django_capture_on_commit_callbacks(execute=True):
        made = override("per_minute", "ip:10.0.0.2", "block")
    tokens.append(redis_client.get(key))
    with django_capture_on_commit_callbacks(execute=True):
        made.reason = "changed"
        made.save()
    tokens.append(redis_client.get(key))
    with django_capture_on_commit_callbacks(execute=True):
        made.delete()
    tokens.append(redis_client.get(key))
    assert len(set(tokens)) == 3 and None not in tokens
    # Not a policy's key, and with a TTL of a day.
    assert 86_000_000 < redis_client.pttl(key) <= 86_400_000
    assert redis_client.keys("*") == [key.encode()]


def test_an_exiting_process_stops_the_loader_thread_first():
    """A daemon thread still logging as the interpreter finalizes can abort the process."""
    from django_rl.overrides.loader import Loader

    loader = Loader()
    loader.start()
    assert loader.running
    started = time.monotonic()
    loader.stop_at_exit()  # what atexit calls
    assert not loader.running
    assert time.monotonic() - started < 1.5  # its wait is bounded (EXIT_WAIT, 1 s)
