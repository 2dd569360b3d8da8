"""A request's policies decided together: all or nothing, one round trip (together.py).

Counted on the server: ``INFO stats`` (reads of client commands) and
``INFO commandstats`` on a redis-server of the test's own, with the history
off so that nothing else writes to it.
"""

from __future__ import annotations

import asyncio

import pytest
from django.core.handlers.asgi import ASGIHandler
from django.test import Client

from django_rl import get_policy, hit_many
from django_rl.core.decision import Decision
from django_rl.exceptions import ConfigurationError
from django_rl.policies import together
from tests.support.asgi import asgi_get

POLICIES = {
    "burst": {"algorithm": "token_bucket", "capacity": 2, "rate": "1/h", "key": "ip"},
    "sustained": {"algorithm": "sliding_log", "rate": "10/m", "key": "ip"},
    "daily": {"algorithm": "fixed_window", "rate": "100/d", "key": "ip"},
    "tight": {"algorithm": "gcra", "rate": "1/h", "burst": 1, "key": "ip"},
    "windowed": {"algorithm": "sliding_window", "rate": "50/h", "key": "ip"},
    "watched": {"algorithm": "sliding_log", "rate": "1/h", "key": "ip", "mode": "shadow"},
    "closed": {"algorithm": "fixed_window", "rate": "0/m", "key": "ip"},
}
URLS = ["/three/", "/three-async/", "/api/three/"]


@pytest.fixture
def limits(settings):
    settings.DJANGO_RL = {"POLICIES": POLICIES, "HISTORY": False}
    settings.ROOT_URLCONF = "tests.sites.urls_together"


def remaining(name: str, identity: str) -> int:
    return get_policy(name).peek(identity).remaining


def server_counts(client) -> tuple[int, dict[str, int]]:
    """Return the server's reads of client commands and its calls of each command."""
    reads = int(client.info("stats")["total_reads_processed"])
    calls = {
        name.removeprefix("cmdstat_"): int(stats["calls"])
        for name, stats in client.info("commandstats").items()
    }
    return reads, calls


@pytest.mark.parametrize("url", URLS)
def test_three_policies_one_round_trip_per_request(settings, limits, private_redis, url):
    # No deny cache: it reads the reset token when it remembers a denial.
    settings.DJANGO_RL = {**settings.DJANGO_RL, "DENY_CACHE_SIZE": 0}
    admin = private_redis.client()
    if "async" in url:
        # Decided on the loop: one loop for every request, as an ASGI server
        # runs (the sync test Client runs each request in a loop of its own,
        # whose connection is its own: a connection per request).
        statuses, counted = asyncio.run(_three_on_one_loop(admin, url))
        (reads_before, calls_before), (reads_after, calls_after) = counted
    else:
        Client(REMOTE_ADDR="203.0.113.6").get(url)  # connect, learn the server, load the script
        client = Client(REMOTE_ADDR="203.0.113.7")
        reads_before, calls_before = server_counts(admin)
        statuses = [client.get(url).status_code for _ in range(3)]
        reads_after, calls_after = server_counts(admin)
    # The bucket of 2 allows two, then burst denies (Redis's denial: the
    # deny cache answers only later ones).
    assert statuses == [200, 200, 429]
    # Each INFO is one read: the first is counted before it answers, the
    # second and third (commandstats, stats) come after.
    assert reads_after - reads_before == 3 + 2
    grew = {
        name: calls_after.get(name, 0) - calls_before.get(name, 0)
        for name in calls_after
        if calls_after.get(name, 0) != calls_before.get(name, 0) and name != "info"
    }
    # Every request is one EVALSHA of the three policies (the commands the
    # script runs inside count too, but no other command came from a client).
    assert grew["evalsha"] == 3
    assert not {"eval", "multi", "exec"} & set(grew)


async def _three_on_one_loop(admin, url):
    app = ASGIHandler()
    await asgi_get(app, url, "203.0.113.6")  # connect, learn the server, load the script
    before = server_counts(admin)
    statuses = [(await asgi_get(app, url, "203.0.113.7"))[0] for _ in range(3)]
    return statuses, (before, server_counts(admin))


@pytest.mark.parametrize("url", URLS)
def test_a_request_burst_denies_costs_the_others_nothing(limits, url):
    client = Client(REMOTE_ADDR="203.0.113.8")
    assert [client.get(url).status_code for _ in range(5)] == [200, 200, 429, 429, 429]
    identity = "ip:203.0.113.8"
    assert remaining("daily", identity) == 98
    assert remaining("sustained", identity) == 8
    assert remaining("burst", identity) == 0


def test_a_denied_requests_decisions_report_each_policys_own_state(limits):
    client = Client(REMOTE_ADDR="203.0.113.9")
    for _ in range(2):
        client.get("/three/")
    denied = client.get("/three/")
    decisions = {d.policy: d for d in denied.wsgi_request.django_rl_decisions}
    assert denied.status_code == 429
    assert (decisions["burst"].allowed, decisions["burst"].remaining) == (False, 0)
    # Not counted, and each says it alone would have allowed the request.
    assert (decisions["sustained"].allowed, decisions["sustained"].remaining) == (True, 8)
    assert (decisions["daily"].allowed, decisions["daily"].remaining) == (True, 98)
    assert denied.wsgi_request.limited is True
    # The headers report the denying policy; Retry-After its wait.
    assert denied["RateLimit"].startswith('"burst";r=0')
    assert int(denied["Retry-After"]) == pytest.approx(3600, abs=2)


def test_hit_many_all_allow_all_count(limits):
    decisions = hit_many([("burst", "a", 1), ("sustained", "a", 2), (get_policy("daily"), "b", 3)])
    assert [(d.policy, d.allowed, d.remaining) for d in decisions] == [
        ("burst", True, 1),
        ("sustained", True, 8),
        ("daily", True, 97),
    ]
    assert all(isinstance(d, Decision) for d in decisions)


@pytest.mark.parametrize("denier", ["tight", "burst", "windowed"])
def test_hit_many_one_denies_none_counts(limits, denier):
    identity = f"many-{denier}"
    limit = {"tight": 1, "burst": 2, "windowed": 50}[denier]
    for _ in range(limit):
        assert get_policy(denier).hit(identity).allowed
    hits = [("sustained", identity, 1), (denier, identity, 1), ("daily", identity, 4)]
    for _ in range(3):
        decisions = hit_many(hits)
        assert [d.allowed for d in decisions] == [True, False, True]
        assert [decisions[0].remaining, decisions[2].remaining] == [10, 100]
    assert remaining("sustained", identity) == 10
    assert remaining("daily", identity) == 100


def test_a_denial_known_without_redis_counts_nothing(limits):
    # "0/m" denies without Redis; the others are looked at, not counted.
    decisions = hit_many([("closed", "z", 1), ("sustained", "z", 1), ("daily", "z", 1)])
    assert [d.allowed for d in decisions] == [False, True, True]
    assert [decisions[1].remaining, decisions[2].remaining] == [10, 100]
    assert remaining("sustained", "z") == 10
    assert remaining("daily", "z") == 100


def test_a_deny_cache_answer_counts_nothing(limits):
    burst = get_policy("burst")
    for _ in range(3):
        burst.hit("cached")  # the third is denied, and remembered
    assert burst.denials is not None
    decisions = hit_many([("burst", "cached", 1), ("sustained", "cached", 1)])
    assert [d.allowed for d in decisions] == [False, True]
    assert remaining("sustained", "cached") == 10


def test_a_shadow_policy_never_denies_the_others(limits):
    assert hit_many([("watched", "s", 1), ("sustained", "s", 1)])[0].allowed
    # Over its limit: its would-be denial counts nothing and vetoes nothing.
    decisions = hit_many([("watched", "s", 1), ("sustained", "s", 1)])
    assert [(d.allowed, d.shadow, d.denies) for d in decisions] == [
        (False, True, False),
        (True, False, False),
    ]
    assert remaining("sustained", "s") == 8
    assert get_policy("watched").peek("s").remaining == 0


def test_two_uses_of_one_key_count_as_their_sum(limits):
    decisions = hit_many([("sustained", "d", 4), ("sustained", "d", 5)])
    assert [d.remaining for d in decisions] == [1, 1]
    decisions = hit_many([("sustained", "d", 1), ("sustained", "d", 1)])
    assert [d.allowed for d in decisions] == [False, False]
    assert remaining("sustained", "d") == 1


def test_hit_many_checks_its_arguments(limits):
    with pytest.raises(ValueError, match="cost"):
        hit_many([("sustained", "x", 0)])
    with pytest.raises(ValueError, match="above the limit"):
        hit_many([("burst", "x", 3)])
    with pytest.raises(ConfigurationError):
        hit_many([("missing", "x", 1)])
    assert hit_many([]) == []


def test_hit_many_follows_fail_open_when_redis_is_down(limits, private_redis):
    private_redis.stop()
    decisions = hit_many([("burst", "o", 1), ("daily", "o", 1)])
    assert [(d.allowed, d.degraded) for d in decisions] == [(True, True), (True, True)]


REFUNDED = {
    "fixed_window": {"algorithm": "fixed_window", "rate": "100/h"},
    "sliding_log": {"algorithm": "sliding_log", "rate": "100/h"},
    "token_bucket": {"algorithm": "token_bucket", "capacity": 100, "rate": "100/h"},
    "gcra": {"algorithm": "gcra", "burst": 100, "rate": "100/h"},
    "sliding_window": {"algorithm": "sliding_window", "rate": "100/h"},
    "concurrency": {"algorithm": "concurrency", "limit": 100, "timeout": 60},
}


@pytest.mark.parametrize("name", list(REFUNDED))
def test_a_refund_leaves_the_state_as_if_never_counted(settings, redis_client, name):
    """A hit reserved on one slot, then taken back after later hits (together.refund)."""
    settings.DJANGO_RL = {"POLICIES": REFUNDED, "HISTORY": False}
    policy = get_policy(name)
    policy.hit("r", 5)
    pending = policy.prepare("r", 7)
    backend = policy.backend
    call = backend.run(pending.key, together.run_script, [pending], True)
    assert call.counted
    assert policy.peek("r").remaining == 100 - 12
    for cost in (1, 2, 3):
        assert policy.hit("r", cost).allowed  # counted while the reservation is pending
    (outcome,) = backend.run(pending.key, together.refund, call)
    assert outcome.remaining == 100 - 11
    assert policy.peek("r").remaining == 100 - 11
    # The state goes on as if the 7 had never counted: 89 more fit, not 90.
    assert policy.hit("r", 89).allowed
    assert not policy.hit("r", 1).allowed


def test_several_limits_of_one_request_are_decided_together(limits):
    """engine.decide: the limits of several @ratelimit uses (as noted on a DRF view)."""
    from django.test import RequestFactory

    from django_rl.policies.engine import Limit, decide

    factory = RequestFactory(REMOTE_ADDR="198.51.100.4")
    uses = [Limit(("burst",), block=False), Limit(("daily",), cost=3)]
    verdicts = [decide(factory.get("/"), uses) for _ in range(3)]
    assert [[d.allowed for d in v.decisions] for v in verdicts] == [
        [True, True],
        [True, True],
        [False, True],
    ]
    # The third was denied by burst (which does not block): daily did not count it.
    assert [v.blocking for v in verdicts] == [[], [], []]
    assert remaining("daily", "ip:198.51.100.4") == 100 - 6


def test_several_policies_work_again_after_script_flush(limits, redis_client):
    """``together.lua`` sent encoded (EVALSHA) meets NOSCRIPT: run as EVAL, cached again."""
    hits = [("burst", "flushed", 1), ("sustained", "flushed", 1), ("daily", "flushed", 1)]
    assert [d.remaining for d in hit_many(hits)] == [1, 9, 99]
    redis_client.script_flush()
    assert [d.remaining for d in hit_many(hits)] == [0, 8, 98]
    assert redis_client.script_exists(together.SCRIPT.sha) == [True]
    third = hit_many(hits)  # burst has none left: denied, so no policy counts it
    assert [(d.allowed, d.remaining) for d in third] == [(False, 0), (True, 8), (True, 98)]
