"""``django_rl.usage`` / ``ausage``: peeks of several policies, counting nothing, one round trip."""

from __future__ import annotations

import asyncio

import pytest
from django.contrib.auth.models import AnonymousUser
from django.test import RequestFactory

import django_rl
from django_rl import get_policy, leases
from django_rl.exceptions import ConfigurationError

#: Five algorithms, each on the request's address; and two that do not apply
#: to an anonymous request, or to any.
POLICIES = {
    "fw": {"algorithm": "fixed_window", "rate": "10/h", "key": "ip"},
    "log": {"algorithm": "sliding_log", "rate": "10/h", "key": "ip"},
    "bucket": {"algorithm": "token_bucket", "capacity": 10, "rate": "10/h", "key": "ip"},
    "gcra": {"algorithm": "gcra", "burst": 10, "rate": "10/h", "key": "ip"},
    "window": {"algorithm": "sliding_window", "rate": "10/h", "key": "ip"},
    "slots": {"algorithm": "concurrency", "limit": 4, "timeout": 60, "key": "ip"},
    "users": {"algorithm": "fixed_window", "rate": "10/h", "key": "user"},
    "nothing": {"algorithm": "fixed_window", "rate": None, "key": "ip"},
    "watched": {"algorithm": "sliding_log", "rate": "2/h", "key": "ip", "mode": "shadow"},
}
FIVE = ["fw", "log", "bucket", "gcra", "window"]
ADDRESS = "203.0.113.40"


@pytest.fixture
def limits(settings):
    settings.DJANGO_RL = {"POLICIES": POLICIES, "HISTORY": False, "DENY_CACHE_SIZE": 0}


def anonymous(address: str = ADDRESS):
    request = RequestFactory().get("/", REMOTE_ADDR=address)
    request.user = AnonymousUser()
    return request


def spend(names, identity: str, times: int) -> None:
    for name in names:
        for _ in range(times):
            get_policy(name).hit(identity)


def test_each_decision_is_the_policys_peek_in_the_given_order(limits):
    spend(FIVE, f"ip:{ADDRESS}", 3)
    names = ["window", "users", "fw", "nothing", "gcra", "log", "bucket"]
    decisions = django_rl.usage(anonymous(), names)
    # "users" (no user) and "nothing" (rate None) do not apply: left out.
    assert [d.policy for d in decisions] == ["window", "fw", "gcra", "log", "bucket"]
    for decision in decisions:
        peeked = get_policy(decision.policy).peek(f"ip:{ADDRESS}")
        assert decision.limit == peeked.limit == 10
        assert decision.remaining == peeked.remaining == 7
        assert decision.allowed and not decision.degraded
        assert decision.window == peeked.window == 3600
        assert decision.reset_after == pytest.approx(peeked.reset_after, abs=2)
        assert decision.reset_after > 0


def test_names_and_policy_objects_mixed(limits):
    decisions = django_rl.usage(anonymous(), [get_policy("log"), "fw"])
    assert [d.policy for d in decisions] == ["log", "fw"]
    assert [d.remaining for d in decisions] == [10, 10]


def test_counts_nothing(limits, redis_client):
    spend(["fw", "log"], f"ip:{ADDRESS}", 2)
    for _ in range(5):
        django_rl.usage(anonymous(), list(POLICIES))
    assert get_policy("fw").peek(f"ip:{ADDRESS}").remaining == 8
    assert get_policy("log").peek(f"ip:{ADDRESS}").remaining == 8
    # Nothing was written for the policies not hit.
    assert not [k for k in redis_client.keys("*") if b":bucket:" in k or b":gcra:" in k]


def test_a_denied_identity_reads_denied_with_its_wait(limits):
    spend(["fw"], f"ip:{ADDRESS}", 10)
    (decision,) = django_rl.usage(anonymous(), ["fw"])
    assert not decision.allowed
    assert decision.remaining == 0
    assert 0 < decision.retry_after <= 3600


def test_a_concurrency_policy_reads_its_slots(limits):
    taken = get_policy("slots").hit(f"ip:{ADDRESS}")
    (decision,) = django_rl.usage(anonymous(), ["slots"])
    assert (decision.limit, decision.remaining) == (4, 3)
    leases.release([taken])


def test_a_shadow_policy_is_marked(limits):
    spend(["watched"], f"ip:{ADDRESS}", 3)
    (decision,) = django_rl.usage(anonymous(), ["watched"])
    assert decision.shadow and not decision.allowed


def test_an_unknown_name_raises(limits):
    with pytest.raises(ConfigurationError):
        django_rl.usage(anonymous(), ["fw", "no-such-policy"])


def test_a_raising_key_function_leaves_its_policy_out(settings, caplog):
    def broken(request):
        raise RuntimeError("boom")

    settings.DJANGO_RL = {
        "POLICIES": {
            "broken": {"algorithm": "fixed_window", "rate": "5/m", "key": broken},
            "fw": POLICIES["fw"],
        },
        "HISTORY": False,
    }
    with caplog.at_level("WARNING", logger="django_rl"):
        decisions = django_rl.usage(anonymous(), ["broken", "fw"])
    assert [d.policy for d in decisions] == ["fw"]
    assert "broken" in caplog.text


def reads(client) -> int:
    return int(client.info("stats")["total_reads_processed"])


def test_five_policies_of_five_algorithms_one_round_trip(settings, private_redis):
    settings.DJANGO_RL = {"POLICIES": POLICIES, "HISTORY": False, "DENY_CACHE_SIZE": 0}
    admin = private_redis.client()
    spend(FIVE, f"ip:{ADDRESS}", 1)
    django_rl.usage(anonymous(), FIVE)  # connected, scripts loaded, clock measured
    before = reads(admin)  # (counted before it answers)
    decisions = django_rl.usage(anonymous(), FIVE)
    after = reads(admin)
    assert [d.remaining for d in decisions] == [9] * 5
    assert after - before == 1 + 1  # the usage, and the second INFO
    # And ten calls: ten round trips.
    before = reads(admin)
    for _ in range(10):
        django_rl.usage(anonymous(), FIVE)
    assert reads(admin) - before == 10 + 1


def test_ausage_one_round_trip_on_the_loop(settings, private_redis):
    settings.DJANGO_RL = {"POLICIES": POLICIES, "HISTORY": False, "DENY_CACHE_SIZE": 0}
    admin = private_redis.client()
    spend(FIVE, f"ip:{ADDRESS}", 2)

    async def run():
        await django_rl.ausage(anonymous(), FIVE)  # the loop's connection, scripts
        before = reads(admin)
        decisions = await django_rl.ausage(anonymous(), [*FIVE, "users", "nothing"])
        return decisions, reads(admin) - before

    decisions, grew = asyncio.run(run())
    assert [d.policy for d in decisions] == FIVE
    assert [d.remaining for d in decisions] == [8] * 5
    assert grew == 1 + 1


def test_redis_down_degrades_every_decision(settings, private_redis):
    settings.DJANGO_RL = {"POLICIES": POLICIES, "HISTORY": False, "FAIL_OPEN": True}
    private_redis.stop()
    decisions = django_rl.usage(anonymous(), FIVE)
    assert [d.policy for d in decisions] == FIVE
    assert all(d.degraded and d.allowed for d in decisions)


def test_rate_limits_disabled_reads_no_limit(limits):
    from django_rl.testing import rate_limits_disabled

    with rate_limits_disabled():
        decisions = django_rl.usage(anonymous(), FIVE)
    assert [(d.allowed, d.limit) for d in decisions] == [(True, 0)] * 5


#: Identities whose keys land on every primary of the test cluster.
IDENTITIES = [f"10.1.0.{i}" for i in range(8)]


def test_every_topology_reads_what_peek_reads(topology, keyspace, settings):
    settings.DJANGO_RL = {"POLICIES": POLICIES, "HISTORY": False, "DENY_CACHE_SIZE": 0}
    for i, address in enumerate(IDENTITIES):
        spend(FIVE, f"ip:{address}", i % 4)
    for i, address in enumerate(IDENTITIES):
        decisions = django_rl.usage(anonymous(address), [*FIVE, "users"])
        assert [d.policy for d in decisions] == FIVE
        assert [d.remaining for d in decisions] == [10 - i % 4] * 5, address
        assert not any(d.degraded for d in decisions)


def test_policies_of_different_keys_across_nodes(topology, keyspace, settings):
    # One policy per identity function: on a cluster, keys of different
    # identities land on different primaries (a pipeline per node).
    policies = {
        "by_ip": {"algorithm": "sliding_log", "rate": "10/h", "key": "ip"},
        "by_header": {"algorithm": "gcra", "burst": 10, "rate": "10/h", "key": "header:X-Team"},
        "by_anon": {"algorithm": "fixed_window", "rate": "10/h", "key": "anon"},
    }
    settings.DJANGO_RL = {"POLICIES": policies, "HISTORY": False, "DENY_CACHE_SIZE": 0}
    for address in IDENTITIES:
        request = anonymous(address)
        request.META["HTTP_X_TEAM"] = f"team-{address}"
        identities = {name: get_policy(name).identify(request) for name in policies}
        get_policy("by_header").hit(identities["by_header"])
        decisions = django_rl.usage(request, list(policies))
        expected = [get_policy(n).peek(identities[n]).remaining for n in policies]
        assert [d.remaining for d in decisions] == expected
        assert expected[1] == 9

        async def run(request=request):
            return await django_rl.ausage(request, list(policies))

        assert [d.remaining for d in asyncio.run(run())] == expected


def test_a_raising_key_function_is_logged_once(settings, caplog):
    def broken(request):
        raise RuntimeError("boom")

    settings.DJANGO_RL = {
        "POLICIES": {"broken2": {"algorithm": "fixed_window", "rate": "5/m", "key": broken}},
        "HISTORY": False,
    }
    with caplog.at_level("WARNING", logger="django_rl"):
        for _ in range(5):
            assert django_rl.usage(anonymous(), ["broken2"]) == []
    assert len([r for r in caplog.records if "broken2" in r.getMessage()]) == 1
