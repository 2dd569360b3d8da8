"""Listing the live counters: bounded SCAN, keys read back, the state of a page in one pipeline."""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_rl import get_policy
from django_rl.core.keys import KeyIdentity, safe_identity
from django_rl.exceptions import BackendError
from django_rl.inspection import (
    LIVE,
    STALE,
    UNCONFIGURED,
    CursorError,
    Query,
    list_counters,
    operator_identity,
    parse_key,
    reset_everywhere,
)
from django_rl.inspection.keyspace import match_pattern, scan_keys
from django_rl.inspection.rows import format_duration
from tests.backends.test_round_trips import command_calls
from tests.conftest import start_of_fresh_window
from tests.support.counting import CountingConnection
from tests.support.redis_server import caches_for, free_port

POLICIES = {
    "fw": {"algorithm": "fixed_window", "rate": "10/h", "key": "ip"},
    "sl": {"algorithm": "sliding_log", "rate": "10/h", "key": "ip"},
    "tb": {"algorithm": "token_bucket", "capacity": 10, "rate": "10/h", "key": "ip"},
}
HOSTILE = "x-api-key:not safe {*}"


@pytest.fixture
def policies(settings, redis_client):
    # No deny cache: these tests count denied hits into Redis on purpose.
    settings.DJANGO_RL = {"KEY_PREFIX": "t", "POLICIES": POLICIES, "DENY_CACHE_SIZE": 0}
    # Hour-long windows: no test meets an edge unless it starts at the very end of one.
    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=60_000)
    return {name: get_policy(name) for name in POLICIES}


def rows_by_key(page):
    return {(row.policy, row.identity): row for row in page.rows}


# Keys taken apart


def test_parse_key_reads_back_every_part():
    parsed = parse_key("rl", "rl:login:{ip:203.0.113.9}:ab5c80bc")
    assert (parsed.policy, parsed.identity, parsed.fingerprint, parsed.window) == (
        "login",
        "ip:203.0.113.9",
        "ab5c80bc",
        None,
    )
    assert isinstance(parsed.identity, KeyIdentity)
    window = parse_key("rl", "rl:api:{user:42}:fe6b28b0:498888")
    assert (window.policy, window.identity, window.window) == ("api", "user:42", 498888)
    digest = safe_identity(HOSTILE)
    assert parse_key("rl", f"rl:k:{{{digest}}}:fe6b28b0").identity == digest


@pytest.mark.parametrize(
    "key",
    [
        "other:login:{ip:1}:ab5c80bc",  # another prefix
        "rlx:login:{ip:1}:ab5c80bc",
        "rl:login:ip:1:ab5c80bc",  # no hash tag
        "rl:login:{ip:1}:AB5C80BC",  # not a fingerprint
        "rl:login:{ip:1}:ab5c80bc:12:13",
        "rl:login:{ip 1}:ab5c80bc",
        "rl:login:{user:~short}:ab5c80bc",  # "~" only in a digest
        "rl:login",
        "rl:",
    ],
)
def test_keys_not_of_this_app_are_not_parsed(key):
    assert parse_key("rl", key) is None


def test_key_identity_passes_through_safe_identity_and_nothing_else_does():
    digest = safe_identity(HOSTILE)
    assert safe_identity(KeyIdentity(digest)) == digest
    assert safe_identity(digest) != digest  # a client sending a digest does not get its key
    with pytest.raises(ValueError, match="is not an identity as keys hold them"):
        KeyIdentity("user:{42}")


def test_operator_identity_takes_digests_as_they_are_and_raw_identities_raw():
    digest = safe_identity(HOSTILE)
    assert isinstance(operator_identity(digest), KeyIdentity)
    assert operator_identity(HOSTILE) == HOSTILE
    assert safe_identity(operator_identity(HOSTILE)) == digest
    assert type(operator_identity("ip:1.2.3.4")) is str


def test_patterns_stay_under_the_prefix():
    assert match_pattern("rl") == "rl:[^~]*"
    assert match_pattern("rl", "login") == "rl:login:*"
    assert match_pattern("rl", None, "ip:10.") == "rl:[^~]*:{ip:10.*"
    assert match_pattern("rl", "login", "user:~ab") == "rl:login:{user:~ab*"
    for bad in ("ip:*", "ip:[a]", "ip:?", "ip\\", "a b", "{"):
        with pytest.raises(ValueError, match="identities in keys have only"):
            match_pattern("rl", None, bad)
    with pytest.raises(ValueError, match="is not a policy name"):
        match_pattern("rl", "lo*gin")


def test_durations_read_like_a_person_writes_them():
    cases = [0, 0.41, 9.99, 10, 59.2, 60, 61, 3599.5, 3600, 3661, 86400, 90000]
    assert [format_duration(s) for s in cases] == [
        "0 s",
        "0.5 s",
        "10 s",
        "10 s",
        "1 min",
        "1 min",
        "1 min 1 s",
        "1 h",
        "1 h",
        "1 h 2 min",
        "1 d",
        "1 d 1 h",
    ]


# Bounded SCAN


def test_scan_walks_every_key_once_in_pages_and_respects_its_budget(redis_client):
    redis_client.mset({f"rl:p:{{ip:{i}}}:00000000": 1 for i in range(1000)})
    redis_client.mset({f"other:{i}": 1 for i in range(1000)})
    targets = [redis_client]
    seen, cursor, calls = [], "0:0", 0
    while cursor is not None:
        step = scan_keys(targets, "rl:*", cursor, want=100, budget=400)
        assert step.examined <= 400
        seen += step.keys
        cursor, calls = step.next_cursor, calls + 1
    assert sorted(seen) == sorted(f"rl:p:{{ip:{i}}}:00000000" for i in range(1000))
    assert len(seen) == 1000  # no key twice: the keyspace did not change
    assert calls >= 2000 // 400


def test_a_narrow_pattern_stops_at_the_budget_and_says_where_to_go_on(redis_client):
    redis_client.mset({f"other:{i}": 1 for i in range(5000)})
    redis_client.set("rl:p:{ip:1}:00000000", 1)
    step = scan_keys([redis_client], "rl:*", "0:0", want=50, budget=1000)
    assert step.examined == 1000
    assert step.next_cursor is not None and step.next_cursor != "0:0"
    found = list(step.keys)
    cursor = step.next_cursor
    while cursor is not None:
        step = scan_keys([redis_client], "rl:*", cursor, want=50, budget=1000)
        found += step.keys
        cursor = step.next_cursor
    assert found == ["rl:p:{ip:1}:00000000"]


def test_bad_cursors_are_refused():
    for bad in ("", "0", "a:1", "0:-1", "0:1:2", f"0:{2**64}"):
        with pytest.raises(CursorError, match="is not a listing cursor"):
            Query(cursor=bad)
    assert Query(cursor=f"0:{2**64 - 1}").cursor == "0:18446744073709551615"


def test_a_cursor_past_the_last_server_is_refused(redis_client):
    with pytest.raises(
        CursorError, match=r"^the listing cursor '1:0' names server 1, but the keys are on 1 "
    ):
        scan_keys([redis_client], "rl:*", "1:0", want=10)


# Rows


def test_live_rows_show_what_peek_sees_for_every_algorithm(policies):
    for _ in range(4):
        policies["fw"].hit("ip:10.0.0.1")
        policies["sl"].hit("ip:10.0.0.1")
        policies["tb"].hit("ip:10.0.0.1")
    rows = rows_by_key(list_counters(Query()))
    assert set(rows) == {(name, "ip:10.0.0.1") for name in POLICIES}
    for name, policy in policies.items():
        row, decision = rows[(name, "ip:10.0.0.1")], policy.peek("ip:10.0.0.1")
        assert (row.status, row.algorithm, row.limit, row.remaining, row.denied) == (
            LIVE,
            policy.algorithm.name,
            10,
            decision.remaining,
            False,
        )
        assert row.reset_after == pytest.approx(decision.reset_after, abs=0.5)
        assert row.keys == tuple(k.decode() for k in policy.backend.client.keys(f"t:{name}:*"))
    assert rows[("fw", "ip:10.0.0.1")].used == 4
    assert rows[("sl", "ip:10.0.0.1")].used == 4
    assert rows[("sl", "ip:10.0.0.1")].detail == "4 entries in the log"
    # Four tokens taken; refill at 10/h gives back a tenth of one in 36 s.
    assert rows[("tb", "ip:10.0.0.1")].used == pytest.approx(4, abs=0.05)
    assert rows[("tb", "ip:10.0.0.1")].detail == "6 tokens left"
    assert rows[("tb", "ip:10.0.0.1")].used_text == "4"


def test_denied_rows_say_so_and_an_over_counted_window_says_by_how_much(policies):
    for _ in range(13):
        policies["fw"].hit("ip:10.0.0.2")
    for _ in range(10):
        policies["tb"].hit("ip:10.0.0.2")
    rows = rows_by_key(list_counters(Query()))
    fixed, bucket = rows[("fw", "ip:10.0.0.2")], rows[("tb", "ip:10.0.0.2")]
    assert (fixed.used, fixed.remaining, fixed.denied) == (13, 0, True)
    assert fixed.detail == "3 over the limit (denied hits count too)"
    assert fixed.retry_after == pytest.approx(fixed.reset_after, abs=0.01) and fixed.retry_after > 0
    assert (bucket.remaining, bucket.denied, bucket.detail) == (0, True, "0 tokens left")
    assert 350 < bucket.retry_after <= 360  # one token back at 10/h


def test_rows_come_heaviest_first(policies):
    for i, hits in enumerate([2, 9, 5]):
        for _ in range(hits):
            policies["sl"].hit(f"ip:10.0.1.{i}")
    policies["fw"].hit("ip:10.0.1.9")
    for _ in range(12):
        policies["fw"].hit("ip:10.0.1.8")  # 12 of 10: heavier than full
    page = list_counters(Query())
    assert [(r.policy, r.identity, r.used) for r in page.rows] == [
        ("fw", "ip:10.0.1.8", 12),
        ("sl", "ip:10.0.1.1", 9),
        ("sl", "ip:10.0.1.2", 5),
        ("sl", "ip:10.0.1.0", 2),
        ("fw", "ip:10.0.1.9", 1),
    ]


def test_digested_identities_are_listed_as_keys_hold_them_and_found_both_ways(policies):
    policies["sl"].hit(HOSTILE)
    digest = safe_identity(HOSTILE)
    (row,) = list_counters(Query()).rows
    assert row.identity == digest
    assert [r.identity for r in list_counters(Query(identity=digest, exact=True)).rows] == [digest]
    assert [r.identity for r in list_counters(Query(identity=HOSTILE, exact=True)).rows] == [digest]
    assert [r.identity for r in list_counters(Query(identity="x-api-key:~")).rows] == [digest]
    assert get_policy("sl").reset(KeyIdentity(row.identity)) == 1


def test_filter_by_policy_and_search_by_identity(policies):
    for ip in ("10.1.0.1", "10.1.0.2", "10.2.0.1"):
        policies["fw"].hit(f"ip:{ip}")
        policies["sl"].hit(f"ip:{ip}")
    policies["sl"].hit("user:10.1")

    def listed(**query):
        return sorted((r.policy, r.identity) for r in list_counters(Query(**query)).rows)

    assert listed(policy="fw") == [
        ("fw", "ip:10.1.0.1"),
        ("fw", "ip:10.1.0.2"),
        ("fw", "ip:10.2.0.1"),
    ]
    assert listed(identity="ip:10.1.") == [
        ("fw", "ip:10.1.0.1"),
        ("fw", "ip:10.1.0.2"),
        ("sl", "ip:10.1.0.1"),
        ("sl", "ip:10.1.0.2"),
    ]
    assert listed(policy="sl", identity="ip:10.1.0.2") == [("sl", "ip:10.1.0.2")]
    assert listed(identity="ip:10.1.0.1", exact=True) == [
        ("fw", "ip:10.1.0.1"),
        ("sl", "ip:10.1.0.1"),
    ]
    assert listed(identity="ip:10.1.0", exact=True) == []  # exact means exact
    assert listed(policy="tb", identity="ip:10.1.0.1", exact=True) == []
    assert listed(identity="nobody") == []


def test_an_exact_search_computes_keys_instead_of_scanning(policies, redis_client):
    redis_client.mset({f"other:{i}": 1 for i in range(5000)})
    policies["tb"].hit("ip:10.3.0.1")
    page = list_counters(Query(identity="ip:10.3.0.1", exact=True))
    assert [(r.policy, r.identity) for r in page.rows] == [("tb", "ip:10.3.0.1")]
    assert (page.examined, page.next_cursor, page.keys_in_redis) == (0, None, 5001)


def test_stale_and_unconfigured_state_is_shown_apart_and_never_counted(settings, policies):
    policies["sl"].hit("ip:10.4.0.1")
    policies["tb"].hit("ip:10.4.0.1")
    policies["fw"].hit("ip:10.4.0.2")
    settings.DJANGO_RL = {
        "KEY_PREFIX": "t",
        "POLICIES": {
            "sl": {"algorithm": "sliding_log", "rate": "20/h", "key": "ip"},  # new fingerprint
            "fw": POLICIES["fw"],
            # "tb" is gone
        },
    }
    get_policy("fw").hit("ip:10.4.0.2")
    rows = list_counters(Query()).rows
    assert [(r.policy, r.identity, r.status) for r in rows] == [
        ("fw", "ip:10.4.0.2", LIVE),
        ("sl", "ip:10.4.0.1", STALE),
        ("tb", "ip:10.4.0.1", UNCONFIGURED),
    ]
    assert rows[0].used == 2
    stale, gone = rows[1], rows[2]
    assert (stale.used, stale.limit, stale.denied, stale.algorithm) == (0, 0, False, "")
    assert 3599 < stale.reset_after <= 3600  # when its key expires
    assert stale.detail == (
        "left by an earlier configuration of this policy; unused, it expires by its TTL"
    )
    assert gone.detail == "policy not configured (or invalid); unused, it expires by its TTL"
    # A broken policy is the same as a missing one here: nothing crashes.
    settings.DJANGO_RL = {"KEY_PREFIX": "t", "POLICIES": {"fw": {"algorithm": "fixed_window"}}}
    assert {r.status for r in list_counters(Query()).rows} == {UNCONFIGURED}


def test_stale_state_without_a_ttl_says_so(policies, redis_client):
    redis_client.set("t:fw:{ip:10.4.0.3}:0badc0de:1", 3)
    (row,) = list_counters(Query()).rows
    assert (row.status, row.reset_after, row.keys) == (
        STALE,
        0.0,
        ("t:fw:{ip:10.4.0.3}:0badc0de:1",),
    )
    assert row.detail == "unused, and it has no TTL: delete it by hand"


def test_keys_under_the_prefix_of_another_form_are_skipped_and_counted(policies, redis_client):
    policies["sl"].hit("ip:10.5.0.1")
    redis_client.set("t:something-else", 1)
    redis_client.set("t:sl:{ip:10.5.0.1}:not-a-fp", 1)
    page = list_counters(Query())
    assert [(r.policy, r.identity) for r in page.rows] == [("sl", "ip:10.5.0.1")]
    assert page.skipped == 2


def test_state_gone_between_scan_and_read_is_left_out(policies, redis_client):
    policies["sl"].hit("ip:10.6.0.1")
    policies["tb"].hit("ip:10.6.0.1")
    backend = policies["sl"].backend
    from django_rl.inspection.keyspace import parse_key as parse
    from django_rl.inspection.rows import read_rows

    parsed = [parse("t", k.decode()) for k in redis_client.keys("t:*")]
    redis_client.delete(*redis_client.keys("t:*"))
    assert read_rows(backend, parsed) == []


def test_the_state_of_a_page_is_read_in_one_round_trip(redis_server, redis_client):
    url = redis_server.url.removesuffix("/0") + "/3"
    caches = caches_for(url, CONNECTION_POOL_KWARGS={"connection_class": CountingConnection})
    with override_settings(CACHES=caches, DJANGO_RL={"KEY_PREFIX": "t", "POLICIES": POLICIES}):
        for i in range(10):
            for name in POLICIES:
                get_policy(name).hit(f"ip:10.7.0.{i}")
        list_counters(Query())  # connect, load the scripts, measure the clock
        before_sends, before = CountingConnection.sends, command_calls([redis_client])
        page = list_counters(Query())
        sends = CountingConnection.sends - before_sends
        after = command_calls([redis_client])
    assert len(page.rows) == 30
    # DBSIZE, one SCAN (its COUNT covers the 30 keys), one pipeline. (redis-py
    # writes a pipeline of more than 6 kB in several sends, still one round
    # trip: it reads no reply before it has sent everything.)
    assert sends == 3
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    # The scripts' own commands (TIME, ZCOUNT, ...) count too; the client's:
    assert {k: delta.get(k) for k in ("dbsize", "scan", "evalsha", "get", "pttl")} == {
        "dbsize": 1,
        "scan": 1,
        "evalsha": 20,
        "get": 10,
        "pttl": 10,
    }


def test_scripts_flushed_from_redis_are_loaded_again(policies, redis_client):
    policies["sl"].hit("ip:10.8.0.1")
    redis_client.script_flush()
    (row,) = list_counters(Query()).rows
    assert (row.policy, row.used) == ("sl", 1)
    redis_client.script_flush()
    assert policies["tb"].peek("ip:10.8.0.1").remaining == 10


def test_reset_everywhere_goes_through_each_policy(policies, settings):
    for policy in policies.values():
        policy.hit("ip:10.9.0.1")
    policies["sl"].hit("ip:10.9.0.2")
    assert reset_everywhere("ip:10.9.0.1") == {"fw": 1, "sl": 1, "tb": 1}
    assert [(r.policy, r.identity) for r in list_counters(Query()).rows] == [("sl", "ip:10.9.0.2")]


def test_redis_down_is_a_backend_error():
    dead = caches_for(f"redis://127.0.0.1:{free_port()}/0")
    with (
        override_settings(CACHES=dead),
        pytest.raises(BackendError, match="could not read the rate-limit counters"),
    ):
        list_counters(Query())
