"""The last hour per policy in Redis (observability/history.py) and its JSON in the admin."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import replace

import pytest
from django.contrib.auth.models import Permission
from django.http import HttpResponse
from django.test import Client, RequestFactory, override_settings

from django_rl import get_policy
from django_rl.decorators import ratelimit
from django_rl.observability import history
from django_rl.observability.history import RECORDER
from tests.conftest import start_of_fresh_window
from tests.support.redis_server import caches_for, free_port

POLICIES = {
    "shadowed": {"algorithm": "fixed_window", "rate": "3/h", "key": "ip", "mode": "shadow"},
    "enforced": {"algorithm": "sliding_log", "rate": "5/h", "key": "ip"},
    "wide": {"algorithm": "fixed_window", "rate": "1000/h", "key": "ip"},
}
URL = "/admin/django_rl/livecounter/charts/"


@pytest.fixture(autouse=True)
def _limits(settings, redis_client):
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=60_000)


def known_traffic() -> None:
    """5 allowed and 3 denied for ``enforced``; 3 allowed and 2 shadow-denied for ``shadowed``."""
    for _ in range(8):
        get_policy("enforced").hit("ip:203.0.113.5")
    for _ in range(5):
        get_policy("shadowed").hit("ip:198.51.100.7")


def totals(answer, name):
    return {kind: sum(answer["policies"][name][kind]) for kind in history.FIELDS}


def command_calls(client) -> dict[str, int]:
    return {
        name.removeprefix("cmdstat_"): int(stats["calls"])
        for name, stats in client.info("commandstats").items()
    }


def test_the_json_shows_exactly_the_decisions_made(admin_client):
    known_traffic()
    assert history.flush() is True
    answer = admin_client.get(URL).json()
    assert len(answer["minutes"]) == history.MINUTES == 60
    assert answer["minutes"][-1] == int(time.time()) // 60
    assert sorted(answer["policies"]) == ["enforced", "shadowed"]
    assert totals(answer, "enforced") == {"allowed": 5, "denied": 3, "shadow_denied": 0}
    assert totals(answer, "shadowed") == {"allowed": 3, "denied": 0, "shadow_denied": 2}
    assert answer["policies"]["enforced"]["top"] == [["ip:203.0.113.5", 3]]
    assert answer["policies"]["shadowed"]["top"] == [["ip:198.51.100.7", 2]]
    # A second flush of new decisions adds to the same minutes.
    get_policy("enforced").hit("ip:192.0.2.1")
    get_policy("enforced").hit("ip:203.0.113.5")
    assert history.flush() is True
    again = admin_client.get(URL).json()
    assert totals(again, "enforced") == {"allowed": 6, "denied": 4, "shadow_denied": 0}
    assert again["policies"]["enforced"]["top"] == [["ip:203.0.113.5", 4]]


def test_a_front_door_counts_each_decision_once(admin_client):
    view = ratelimit("shadowed", "enforced")(lambda request: HttpResponse("ok"))
    factory = RequestFactory()
    codes = [view(factory.get("/", REMOTE_ADDR="192.0.2.8")).status_code for _ in range(7)]
    assert codes == [200] * 5 + [429] * 2
    assert history.flush() is True
    answer = admin_client.get(URL).json()
    assert totals(answer, "enforced") == {"allowed": 5, "denied": 2, "shadow_denied": 0}
    assert totals(answer, "shadowed") == {"allowed": 3, "denied": 0, "shadow_denied": 4}


def test_no_command_reaches_redis_until_the_flush_then_one_pipeline(redis_client):
    policy = get_policy("wide")  # fixed_window: none of the history's commands
    policy.hit("ip:203.0.113.5")  # connect, learn the server
    assert history.flush() is True
    before = command_calls(redis_client)
    for _ in range(40):
        policy.hit("ip:203.0.113.5")
    during = command_calls(redis_client)
    delta = {k: during.get(k, 0) - before.get(k, 0) for k in during}
    delta = {k: v for k, v in delta.items() if v and k != "info"}
    assert set(delta) <= {"multi", "incrby", "pexpireat", "pexpire", "pttl", "exec"}
    assert delta["exec"] == 40  # one transaction per decision, nothing else
    assert RECORDER.pending() == 40

    assert history.flush() is True
    after = command_calls(redis_client)
    delta = {k: after.get(k, 0) - during.get(k, 0) for k in after}
    delta = {k: v for k, v in delta.items() if v and k != "info"}
    # All 40 allowed: per minute one HINCRBY and its PEXPIRE; the listing's three.
    minutes = delta["hincrby"]
    assert minutes in (1, 2)  # the 40 decisions straddled at most one minute's end
    assert delta == {"hincrby": minutes, "pexpire": minutes + 1, "zadd": 1, "zremrangebyscore": 1}


def test_every_key_has_a_ttl_and_none_is_under_a_policy(redis_client):
    known_traffic()
    assert history.flush() is True
    keys = sorted(key.decode() for key in redis_client.scan_iter("rl:~history:*"))
    assert keys and all(key.startswith("rl:~history:") for key in keys)
    assert not [key for key in redis_client.scan_iter("rl:enforced:*") if b"~history" in key]
    for key in keys:
        ttl = redis_client.pttl(key)
        limit = history.TOP_TTL_MS if ":top:" in key else history.COUNTS_TTL_MS
        assert 0 < ttl <= limit, key
        assert history.COUNTS_TTL_MS > history.MINUTES * 60_000  # a bit over the hour shown


def test_bytes_per_policy_per_hour(redis_client):
    """A full hour of one policy: 60 minutes with every kind counted, and its top sets."""
    now = int(time.time()) // 60
    counts = {
        ("enforced", minute, field): 1_000_000 + minute % 7
        for minute in range(now - 59, now + 1)
        for field in ("a", "d", "s")
    }
    denied = {
        ("enforced", minute): {f"ip:203.0.113.{i}": i + 1 for i in range(history.TOP_KEPT)}
        for minute in (now - 1, now)
    }
    assert history.write(counts, denied) == set()
    keys = list(redis_client.scan_iter("rl:~history:{enforced}:*"))
    assert len(keys) == 62
    used = sum(redis_client.memory_usage(key, samples=0) for key in keys)
    print(f"\nhistory: {used} bytes per policy per hour ({len(keys)} keys)")
    assert used <= 12_000  # docs/observability.md states the figure


def test_hostile_identities_are_bounded_in_process_and_in_redis(redis_client):
    policy = get_policy("enforced")
    decision = policy.hit("ip:198.51.100.1")
    denial = replace(decision, allowed=False)
    for i in range(history.MAX_IDENTITIES * 3):
        history.record("enforced", denial, f"ip:{i}:" + "x" * 10_000)
    tracked = sum(len(who) for who in RECORDER._denied.values())
    assert tracked <= 2 * history.MAX_IDENTITIES  # one minute, or two if it turned
    assert history.flush() is True
    answer = history.read(["enforced"])
    assert sum(answer["policies"]["enforced"]["denied"]) == history.MAX_IDENTITIES * 3
    top = answer["policies"]["enforced"]["top"]
    assert 0 < len(top) <= 2 * history.TOP_KEPT
    assert all(len(identity) <= 100 for identity, _ in top)
    for key in redis_client.scan_iter("rl:~history:{enforced}:top:*"):
        assert redis_client.zcard(key) <= history.TOP_KEPT
        assert redis_client.memory_usage(key, samples=0) < 4_000


def by_minuteless(counted: dict) -> dict:
    merged: dict = {}
    for (policy, _minute, *rest), value in counted.items():
        key = (policy, *rest)
        if isinstance(value, dict):
            merged.setdefault(key, {}).update(value)
        else:
            merged[key] = merged.get(key, 0) + value
    return merged


def test_counting_several_at_once_is_counting_each(redis_client):
    """``count_many`` (a request of several policies) counts as ``count`` does, bounded alike."""
    one, many = history.Recorder(), history.Recorder()
    one.autostart = many.autostart = False
    rows = [
        ("enforced", "a", "ip:1"),
        ("enforced", "d", "ip:2:" + "x" * 10_000),
        ("shadowed", "s", "ip:3"),
        ("wide", "d", None),
    ]
    for _ in range(3):
        for row in rows:
            one.count(*row)
        many.count_many(rows)
    # By policy and field, and by policy: the minute may turn between the two.
    assert by_minuteless(many._counts) == by_minuteless(one._counts) == {
        ("enforced", "a"): 3, ("enforced", "d"): 3, ("shadowed", "s"): 3, ("wide", "d"): 3,
    }  # fmt: skip
    assert by_minuteless(many._denied) == by_minuteless(one._denied)
    assert all(len(who) <= 100 for denied in many._denied.values() for who in denied)
    for i in range(history.MAX_IDENTITIES * 2):
        many.count_many([("enforced", "d", f"ip:{i}"), ("wide", "a", f"ip:{i}")])
    assert max(len(who) for who in many._denied.values()) == history.MAX_IDENTITIES


def test_an_outage_during_a_flush_loses_nothing_and_raises_nothing(settings):
    known_traffic()
    live = settings.CACHES
    with override_settings(CACHES=caches_for(f"redis://127.0.0.1:{free_port()}/0")):
        assert history.flush() is False  # no exception
        # Decisions during the outage (degraded) are counted too.
        get_policy("enforced").hit("ip:203.0.113.5")
        assert history.flush() is False
        assert RECORDER.pending() == 14
    settings.CACHES = live
    assert history.flush() is True
    assert RECORDER.pending() == 0
    answer = history.read()
    assert totals(answer, "shadowed") == {"allowed": 3, "denied": 0, "shadow_denied": 2}
    # The degraded one is counted as what the client met (fail_open: allowed).
    assert totals(answer, "enforced") == {"allowed": 6, "denied": 3, "shadow_denied": 0}


def test_writes_a_live_server_refuses_are_kept_and_warned_of_once(settings, private_redis, caplog):
    """An ACL user without HINCRBY: the charts would stay empty; one WARNING says why."""
    from django_rl.checks.acl import acl_rule

    caplog.set_level(logging.INFO, logger="django_rl")
    admin = private_redis.client()
    try:
        # The least-privilege rule, less the history's counting command.
        rule = [part for part in acl_rule("rl").split() if part != "+hincrby"]
        admin.execute_command("ACL", "SETUSER", "limiter", *rule, ">secret")
    finally:
        admin.close()
    url = f"redis://limiter:secret@127.0.0.1:{private_redis.port}/0?client_name=rl_history_acl"
    settings.CACHES = caches_for(url)
    history.REFUSALS.reset()
    RECORDER.discard()
    known_traffic()
    assert history.flush() is False
    assert history.flush() is False
    assert RECORDER.pending() == 13  # kept for the next flush: nothing lost
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert re.fullmatch(
        r"Rate-limit history: Redis refused HINCRBY \(.*no permissions.*'hincrby'.*\); "
        r"the admin's charts miss these counts .*acl\.acl_rule\(KEY_PREFIX\).*",
        warnings[0],
    ), warnings[0]
    RECORDER.discard()


def test_a_policy_quiet_for_the_hour_leaves_the_listing(redis_client):
    now = int(time.time()) // 60
    assert history.write({("enforced", now - 70, "a"): 1}, {}) == set()
    assert redis_client.zrange("rl:~history:policies", 0, -1) == [b"enforced"]
    assert history.write({("wide", now, "a"): 1}, {}) == set()
    assert redis_client.zrange("rl:~history:policies", 0, -1) == [b"wide"]
    # A retried older minute does not move a policy back.
    assert history.write({("wide", now - 3, "a"): 1}, {}) == set()
    assert redis_client.zscore("rl:~history:policies", "wide") == now


def test_counts_older_than_the_hour_are_dropped_on_failure():
    old = int(time.time() - history.RETRY_FOR_S - 120) // 60
    counts = {("enforced", old, "d"): 7}
    RECORDER._put_back(counts, {}, set(counts))
    assert RECORDER.pending() == 0 and RECORDER.dropped >= 7


def test_the_thread_flushes_within_its_interval(redis_client, monkeypatch):
    monkeypatch.setattr(RECORDER, "autostart", True)
    try:
        started = time.monotonic()
        get_policy("enforced").hit("ip:203.0.113.5")
        assert RECORDER.running
        key = history.counts_key("rl", "enforced", int(time.time()) // 60)
        while not redis_client.exists(key) and time.monotonic() - started < 10:
            time.sleep(0.02)
        elapsed = time.monotonic() - started
    finally:
        RECORDER.stop()
    # One interval, plus a margin for a busy 2-core machine.
    assert elapsed < history.FLUSH_INTERVAL + 1.5, elapsed
    assert RECORDER.pending() == 0


def test_the_json_needs_the_view_permission(django_user_model):
    user = django_user_model.objects.create_user("clerk", password="pw", is_staff=True)
    client = Client()
    client.force_login(user)
    assert client.get(URL).status_code == 403
    user.user_permissions.set(Permission.objects.filter(codename="view_livecounter"))
    client = Client()
    client.force_login(user)
    assert client.get(URL).status_code == 200


def test_redis_down_answers_503(admin_client):
    with override_settings(CACHES=caches_for(f"redis://127.0.0.1:{free_port()}/0")):
        response = admin_client.get(URL)
    assert response.status_code == 503
    assert response.json()["error"].startswith("Redis could not be read")


def test_counting_decisions_keeps_every_one_in_memory_until_a_flush():
    """What record() adds to each decision: an increment in this process.

    Its CPU cost (a clock read, a lock, a dict increment: 2.0 µs on a quiet
    machine) is measured by ``bench.observability``, not here: a timed unit
    test fails on a slow host.
    """
    policy = get_policy("wide")
    allowed = policy.hit("ip:203.0.113.5")
    denied = replace(allowed, allowed=False)
    recorder = history.Recorder()
    recorder.autostart = False
    for _step in range(10_000):
        recorder.record("wide", allowed, "ip:203.0.113.5")
        recorder.record("wide", denied, "ip:198.51.100.7")
    assert recorder.pending() == 20_000
    assert recorder.flush() is True
    assert recorder.pending() == 0


def test_the_django_ratelimit_drop_in_shows_in_the_charts(admin_client, redis_client):
    from django_rl.contrib.ratelimit import store
    from django_rl.contrib.ratelimit.core import is_ratelimited

    start_of_fresh_window(redis_client, 60_000, min_left_ms=3_000)
    request = RequestFactory().get("/", REMOTE_ADDR="192.0.2.44")
    try:
        limited = [
            is_ratelimited(request, group="search", key="ip", rate="2/m", increment=True)
            for _ in range(5)
        ]
        name = store.policy_for("search", "ALL").name
    finally:
        store.forget_policies()
    assert limited == [False, False, True, True, True]
    assert history.flush() is True
    answer = admin_client.get(URL).json()
    assert totals(answer, name) == {"allowed": 2, "denied": 3, "shadow_denied": 0}
    assert answer["policies"][name]["top"] == [["ip:192.0.2.44", 3]]


def test_history_off_counts_nothing(settings):
    settings.DJANGO_RL = {"POLICIES": POLICIES, "HISTORY": False}
    known_traffic()
    assert RECORDER.pending() == 0
    assert history.flush() is True
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    get_policy("wide").hit("ip:203.0.113.5")
    assert RECORDER.pending() == 1


def test_a_history_setting_that_is_not_a_bool_is_a_check_error(settings):
    from django_rl.checks.system import check_settings

    settings.DJANGO_RL = {"POLICIES": POLICIES, "HISTORY": "yes"}
    errors = [error for error in check_settings() if "HISTORY" in error.msg]
    assert [(error.msg, error.hint) for error in errors] == [
        (
            "DJANGO_RL['HISTORY'] is 'yes'",
            "It must be True (the last hour per policy in Redis, for the admin's charts) or False.",
        )
    ]


def test_the_drf_drop_in_shows_in_the_charts(admin_client, settings, redis_client):
    from rest_framework.test import APIRequestFactory

    from tests.sites import views_contrib_drf

    start_of_fresh_window(redis_client, 60_000, min_left_ms=3_000)
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "3/min"}}
    request = APIRequestFactory().get("/", REMOTE_ADDR="192.0.2.45")
    view = views_contrib_drf.AnonView.as_view()
    assert [view(request).status_code for _ in range(5)] == [200] * 3 + [429] * 2
    assert history.flush() is True
    answer = admin_client.get(URL).json()
    assert totals(answer, "drf.anon") == {"allowed": 3, "denied": 2, "shadow_denied": 0}
    [(identity, denials)] = answer["policies"]["drf.anon"]["top"]
    assert denials == 2 and "192.0.2.45" in identity


def test_an_exiting_process_stops_the_history_thread_before_its_last_flush(redis_client):
    """A daemon thread still logging as the interpreter finalizes can abort the process."""
    from django_rl.observability.history import Recorder

    recorder = Recorder()
    recorder.start()
    assert recorder.running
    recorder.count("login", "a", "ip:192.0.2.1")
    assert recorder.pending() == 1
    recorder.at_exit()  # what atexit calls
    assert not recorder.running
    assert recorder.pending() == 0  # the last counts written, by the exiting thread itself
