"""``concurrency``: at most ``limit`` requests of one identity in flight at once.

The slot is taken before the view and given back when the response is
closed (streaming included), at once when the view raises, for sync and
async views and DRF; a slot nobody gives back ends at the policy's
``timeout``, on the Redis server's clock. Caches, 304s and ASGI clients that
leave: test_concurrency_lifecycle.py.
"""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient

from django_rl import get_policy, hit_many, leases
from django_rl.algorithms.concurrency import RETRY_AFTER_MS, Concurrency
from django_rl.checks.validation import policy_problems
from django_rl.exceptions import ConfigurationError
from tests.conftest import server_ms, sleep_until
from tests.sites.urls_concurrency import IDENTITY

LIMIT = 3
POLICIES = {
    "slots": {"algorithm": "concurrency", "limit": LIMIT, "timeout": 30, "key": "ip"},
    "brief": {"algorithm": "concurrency", "limit": 2, "timeout": 1, "key": "ip"},
    "once": {"algorithm": "fixed_window", "rate": "1/h", "key": "ip"},
}


@pytest.fixture(autouse=True)
def policies(settings, redis_client):
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    return {name: get_policy(name) for name in POLICIES}


def left(name: str = "slots", identity: str = IDENTITY) -> int:
    return get_policy(name).peek(identity).remaining


# The algorithm


def test_at_most_limit_in_flight_and_released_slots_come_back(policies, redis_client):
    policy = policies["slots"]
    held = [policy.hit(IDENTITY) for _ in range(LIMIT + 1)]
    assert [(d.allowed, d.remaining) for d in held] == [(True, 2), (True, 1), (True, 0), (False, 0)]
    assert [d.lease is not None for d in held] == [True, True, True, False]
    assert held[3].retry_after == RETRY_AFTER_MS / 1000
    assert 29 < held[3].reset_after <= 30
    assert leases.release(held[0]) == 1
    assert leases.release(held[0]) == 0  # once
    assert left() == 1
    assert policy.hit(IDENTITY, 2).allowed is False  # cost 2 takes two slots: one is free
    assert leases.release(held) == 2
    assert left() == LIMIT
    assert redis_client.keys("*") == []  # no lease left: no key


def test_cost_takes_that_many_slots(policies):
    policy = policies["slots"]
    heavy = policy.hit(IDENTITY, 2)
    assert (heavy.allowed, heavy.remaining) == (True, 1)
    assert policy.hit(IDENTITY, 2).allowed is False
    one = policy.hit(IDENTITY)
    assert (one.allowed, one.remaining) == (True, 0)
    assert leases.release([heavy, one]) == 3
    assert left() == LIMIT


def test_holding_gives_back_however_the_block_ends(policies):
    with pytest.raises(KeyError), leases.holding(policies["slots"].hit(IDENTITY)) as decision:
        assert decision.allowed and left() == LIMIT - 1
        raise KeyError
    assert left() == LIMIT


def test_a_dead_holders_slots_end_after_timeout_on_the_server_clock(policies, redis_client):
    policy = policies["brief"]
    before = server_ms(redis_client)
    taken = [policy.hit(IDENTITY) for _ in range(2)]  # never released: the holder "died"
    after = server_ms(redis_client)
    assert all(d.allowed for d in taken)
    ttl = redis_client.pttl(policy.key(IDENTITY))
    assert 0 < ttl <= 1000
    denied = policy.hit(IDENTITY)
    if server_ms(redis_client) < before + 1000:  # still inside the leases' life
        assert (denied.allowed, denied.remaining) == (False, 0)
        # Retry-After: when the first lease ends, at most 1 s.
        assert 0 < denied.retry_after <= 1.0
    sleep_until(redis_client, after + 1000 + 1)  # past the end of every lease
    assert left("brief") == 2
    assert policy.hit(IDENTITY).allowed and policy.hit(IDENTITY).allowed


def test_the_deny_cache_never_answers_for_it(policies):
    policy = policies["slots"]
    held = [policy.hit(IDENTITY) for _ in range(LIMIT)]
    for _ in range(3):
        assert policy.hit(IDENTITY).allowed is False
    leases.release(held[0])
    assert policy.hit(IDENTITY).allowed  # a slot came back: the next hit sees it at once


def test_peek_counts_nothing_and_reset_frees_every_slot(policies, redis_client):
    policy = policies["slots"]
    for _ in range(LIMIT):
        policy.hit(IDENTITY)
    peeked = policy.peek(IDENTITY)
    assert (peeked.allowed, peeked.remaining, peeked.retry_after) == (False, 0, 1.0)
    assert policy.reset(IDENTITY) == 1
    assert left() == LIMIT and redis_client.keys("rl:slots:*") == []


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"limit": 0, "timeout": 5}, "limit must be between 1 and 10,000"),
        ({"limit": "3", "timeout": 5}, "limit must be a whole number"),
        ({"limit": True, "timeout": 5}, "limit must be a whole number"),
        ({"limit": 3, "timeout": 0}, "timeout must be between 0.001 and 86,400 seconds"),
        ({"limit": 3, "timeout": "5"}, "timeout must be a number of seconds"),
        ({"limit": 3, "timeout": float("nan")}, "timeout must be a number of seconds"),
        ({"limit": 3}, "lacks 'timeout'"),
        ({"limit": 3, "timeout": 5, "rate": "5/m"}, "sets 'rate', which concurrency does not use"),
    ],
)
def test_bad_parameters_are_check_errors_and_never_500(settings, client, spec, message):
    bad = {"algorithm": "concurrency", "key": "ip", **spec}
    problems = policy_problems("bad", bad)
    assert [p.id for p in problems][:1] in (
        ["django_rl.E010"],
        ["django_rl.E008"],
        ["django_rl.E009"],
    )
    assert message in problems[0].msg
    settings.DJANGO_RL = {"POLICIES": {**POLICIES, "bad": bad}}
    with pytest.raises(ConfigurationError, match=message):
        get_policy("bad")


def test_the_description_names_limit_and_timeout():
    assert Concurrency(5, 30).description == "concurrency 5 timeout 30s"
    assert Concurrency(5, 0.5).timeout_ms == 500


# All or nothing with other policies


def test_a_request_another_policy_denies_takes_no_slot(policies):
    once, slots = policies["once"], policies["slots"]
    first = hit_many([(slots, IDENTITY, 1), (once, IDENTITY, 1)])
    assert [d.allowed for d in first] == [True, True] and first[0].lease is not None
    second = hit_many([(slots, IDENTITY, 1), (once, IDENTITY, 1)])
    assert [d.allowed for d in second] == [True, False]
    assert second[0].lease is None  # not counted: no slot
    assert left() == LIMIT - 1
    leases.release(first)
    assert left() == LIMIT


# The front doors


@pytest.mark.urls("tests.sites.urls_concurrency")
def test_a_view_holds_its_slot_until_the_response_is_closed(client):
    assert client.get("/plain/").content == b"2"
    assert client.get("/heavy/").content == b"1"
    assert left() == LIMIT


@pytest.mark.urls("tests.sites.urls_concurrency")
def test_a_streaming_response_holds_its_slot_while_it_streams(client):
    response = client.get("/streaming/")
    body = iter(response.streaming_content)
    assert next(body) == b"2"
    assert left() == LIMIT - 1  # the response is open
    assert b"".join(body) == b",2"  # the test client closes it after the last chunk
    assert left() == LIMIT


@pytest.mark.urls("tests.sites.urls_concurrency")
def test_a_view_that_raises_gives_its_slot_back(client):
    with pytest.raises(ValueError, match=r"^2$"):
        client.get("/raising/")
    assert left() == LIMIT


@pytest.mark.urls("tests.sites.urls_concurrency")
def test_an_async_view_holds_its_slot_until_the_response_is_closed():
    # AsyncClient closes the response as Django's ASGI handler does, after its body.
    async def fetch():
        return await AsyncClient().get("/async/")

    # A coroutine function of our own: Django 4.2's AsyncClient.get is not
    # marked async, and asgiref warns (an error in this suite) when given it.
    response = async_to_sync(fetch)()
    assert response.content == b"2"
    assert left() == LIMIT


@pytest.mark.urls("tests.sites.urls_concurrency")
@pytest.mark.parametrize("url", ["/drf/", "/drf-decorated/"])
def test_drf_views_hold_their_slot_until_the_response_is_closed(client, url):
    assert client.get(url).json() == {"left": "2"}
    assert left() == LIMIT


@pytest.mark.urls("tests.sites.urls_concurrency")
def test_a_drf_view_that_raises_gives_its_slot_back(client):
    with pytest.raises(ValueError, match=r"^2$"):
        client.get("/drf-raising/")
    assert left() == LIMIT


@pytest.mark.urls("tests.sites.urls_concurrency")
@pytest.mark.parametrize("url", ["/plain/", "/async/", "/drf/", "/drf-decorated/"])
def test_full_answers_429_with_retry_after_and_takes_nothing(client, policies, url):
    held = [policies["slots"].hit(IDENTITY) for _ in range(LIMIT)]
    response = client.get(url)
    assert response.status_code == 429
    assert response["Retry-After"] == "1"
    assert left() == 0
    leases.release(held)
    assert left() == LIMIT


@pytest.mark.urls("tests.sites.urls_concurrency")
def test_a_request_the_other_policy_refuses_takes_no_slot(client):
    assert client.get("/two/").content == b"2"
    refused = client.get("/two/")
    assert refused.status_code == 429
    assert left() == LIMIT  # the first gave its slot back; the second took none


# The admin page and the command


def test_inspect_shows_the_slots_in_flight(policies):
    import io

    from django.core.management import call_command

    held = [policies["slots"].hit(IDENTITY) for _ in range(2)]
    out = io.StringIO()
    call_command("ratelimit", "inspect", "slots", IDENTITY, stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "policy       slots (concurrency 3 timeout 30s)"
    assert lines[2:5] == ["allowed      yes", "limit        3", "remaining    1"]
    assert lines[-1].split()[:2] == [policies["slots"].key(IDENTITY), "zset"]
    leases.release(held)


def test_the_admin_shows_a_live_row_and_resets_it(admin_client, policies):
    held = [policies["slots"].hit(IDENTITY) for _ in range(LIMIT)]
    rows = admin_client.get("/admin/django_rl/livecounter/data/").json()["rows"]
    (row,) = [r for r in rows if r["policy"] == "slots"]
    assert {k: row[k] for k in ("identity", "algorithm", "limit", "used", "remaining")} == {
        "identity": IDENTITY,
        "algorithm": "concurrency",
        "limit": LIMIT,
        "used": LIMIT,
        "remaining": 0,
    }
    assert (row["denied"], row["retry_after"], row["detail"]) == (True, 1.0, "3 of 3 in flight")
    response = admin_client.post(
        "/admin/django_rl/livecounter/reset/",
        {"rows": [f"slots:{IDENTITY}"], "confirmed": "yes"},
        follow=True,
    )
    assert [str(m) for m in response.context["messages"]] == ["Reset 1 counter: 1 key deleted."]
    assert left() == LIMIT
    leases.release(held)  # given back after the reset: removes nothing, harmless
    assert left() == LIMIT
