"""The local deny cache: exact rules on an injected clock, then through policies on Redis."""

from __future__ import annotations

import copy

import pytest
from django.core.checks import Error
from django.test import override_settings

from django_rl import Decision, get_policy
from django_rl.checks.system import check_settings
from django_rl.policies import reset_epoch
from django_rl.policies.deny_cache import DenyCache, get_deny_cache
from tests.conftest import server_ms, sleep_until
from tests.support.redis_server import caches_for, free_port


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def denied(retry_after: float = 2.0, reset_after: float = 3.0, **fields: object) -> Decision:
    values: dict[str, object] = {
        "allowed": False,
        "limit": 5,
        "remaining": 0,
        "retry_after": retry_after,
        "reset_after": reset_after,
        "policy": "p",
        **fields,
    }
    return Decision(**values)  # type: ignore[arg-type]


@pytest.fixture
def clock() -> Clock:
    return Clock(100.0)


def test_a_denial_is_answered_until_its_retry_after_less_the_margins(clock):
    cache = DenyCache(10, 60, clock=clock)
    cache.remember("k", denied(), 1, asked_at=100.0, any_cost=False)
    clock.now = 100.5
    assert cache.lookup("k", 1) == denied(retry_after=1.5, reset_after=2.5)
    # 2 s less 0.1% and 1 ms: the entry ends at 101.997.
    clock.now = 101.996
    assert cache.lookup("k", 1) is not None
    clock.now = 101.998
    assert cache.lookup("k", 1) is None
    assert len(cache) == 0


def test_answers_are_in_whole_milliseconds_and_reused_within_one(clock):
    cache = DenyCache(10, 60, clock=clock)
    cache.remember("k", denied(), 1, asked_at=100.0, any_cost=False)
    clock.now = 100.0004
    first = cache.lookup("k", 1)
    clock.now = 100.0009
    assert cache.lookup("k", 1) is first
    assert (first.retry_after, first.reset_after) == (2.0, 3.0)
    clock.now = 100.0011
    assert (cache.lookup("k", 1).retry_after, cache.lookup("k", 1).reset_after) == (1.999, 2.999)


def test_max_age_bounds_a_long_denial(clock):
    cache = DenyCache(10, 60, clock=clock)
    cache.remember("k", denied(retry_after=3600.0, reset_after=3600.0), 1, 100.0, any_cost=True)
    clock.now = 159.5
    assert cache.lookup("k", 1) == denied(retry_after=3540.5, reset_after=3540.5)
    clock.now = 160.1
    assert cache.lookup("k", 1) is None


def test_cost_rules(clock):
    cache = DenyCache(10, 60, clock=clock)
    # A denial of cost 2 on a log or a bucket says nothing about cost 1.
    cache.remember("heavy", denied(), 2, 100.0, any_cost=False)
    assert "heavy" not in cache
    # A denial of cost 1 answers cost 1 only: cost 2 would be told too short a wait.
    cache.remember("light", denied(), 1, 100.0, any_cost=False)
    assert cache.lookup("light", 2) is None
    assert cache.lookup("light", 1) == denied()
    # A fixed window's denial holds for every cost.
    cache.remember("window", denied(), 3, 100.0, any_cost=True)
    assert cache.lookup("window", 1) == denied()
    assert cache.lookup("window", 5) == denied()


@pytest.mark.parametrize(
    "decision",
    [
        denied(allowed=True, retry_after=0.0),
        denied(degraded=True),
        denied(remaining=1),
        denied(retry_after=0.001),  # over before it could be used
    ],
    ids=["allowed", "degraded", "remaining", "too-short"],
)
def test_what_is_never_remembered(clock, decision):
    cache = DenyCache(10, 60, clock=clock)
    cache.remember("k", decision, 1, 100.0, any_cost=True)
    assert len(cache) == 0


def test_bounded_the_oldest_remembered_goes_first(clock):
    cache = DenyCache(2, 60, clock=clock)
    for key in ("a", "b", "c"):
        cache.remember(key, denied(), 1, 100.0, any_cost=True)
    assert (list(cache._entries), len(cache)) == (["b", "c"], 2)
    cache.remember("b", denied(), 1, 100.0, any_cost=True)  # b is now the newest
    cache.remember("d", denied(), 1, 100.0, any_cost=True)
    assert list(cache._entries) == ["b", "d"]
    cache.forget("b")
    assert list(cache._entries) == ["d"]
    cache.clear()
    assert len(cache) == 0


def test_at_least_one_entry():
    with pytest.raises(ValueError, match="max_entries must be at least 1, not 0"):
        DenyCache(0, 60)


# Through policies, on the suite's Redis ---------------------------------------

ALGORITHMS = {
    "fixed_window": {"algorithm": "fixed_window", "rate": "3/h", "key": "ip"},
    "sliding_log": {"algorithm": "sliding_log", "rate": "3/h", "key": "ip"},
    "token_bucket": {"algorithm": "token_bucket", "capacity": 3, "rate": "3/h", "key": "ip"},
    "gcra": {"algorithm": "gcra", "burst": 3, "rate": "3/h", "key": "ip"},
    "sliding_window": {"algorithm": "sliding_window", "rate": "3/h", "key": "ip"},
    "quota": {"algorithm": "quota", "limit": 3, "period": "day", "key": "ip"},
}
ID = "ip:192.0.2.44"


def commands_sent(client, action) -> dict[str, int]:
    """Run ``action`` and return the commands Redis ran meanwhile (by name)."""

    def calls():
        stats = client.info("commandstats")
        return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}

    before = calls()
    action()
    after = calls()
    return {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)} | {
        "info": 0
    }


@pytest.fixture(params=list(ALGORITHMS))
def policy(request, settings, redis_client):
    from tests.conftest import start_of_fresh_window

    settings.DJANGO_RL = {"POLICIES": {"p": ALGORITHMS[request.param]}}
    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=60_000)
    return get_policy("p")


def use_up(policy, identity=ID):
    assert [policy.hit(identity).allowed for _ in range(3)] == [True] * 3


def test_a_flood_after_a_denial_sends_redis_nothing(policy, redis_client):
    use_up(policy)
    # The process's first denial is not remembered: the reset token is
    # read then (reset_epoch.py), as the baseline of later reads.
    assert not policy.hit(ID).allowed
    first = policy.hit(ID)
    assert not first.allowed
    flood = []
    sent = commands_sent(redis_client, lambda: flood.extend(policy.hit(ID) for _ in range(50)))
    assert sent == {"info": 0}
    assert {(d.allowed, d.limit, d.remaining, d.policy, d.degraded) for d in flood} == {
        (False, 3, 0, "p", False)
    }
    assert all(first.retry_after - 1 < d.retry_after <= first.retry_after for d in flood)
    assert [d.retry_after for d in flood] == sorted((d.retry_after for d in flood), reverse=True)


def test_reset_forgets_the_denial_in_this_process(policy):
    use_up(policy)
    assert not policy.hit(ID).allowed
    policy.reset(ID)
    decision = policy.hit(ID)
    assert (decision.allowed, decision.remaining) == (True, 2)


def test_a_cache_without_the_reset_token_keeps_denying_until_its_entry_ends(policy):
    # Two processes: two deny caches over one Redis; the other reads no token.
    other = copy.copy(policy)
    other.denials = DenyCache(10, 60)
    use_up(policy)
    assert not policy.hit(ID).allowed
    assert not other.hit(ID).allowed
    policy.reset(ID)
    assert policy.hit(ID).allowed
    assert other.hit(ID).allowed is False  # from its own cache, for now


def other_process(policy, clock):
    """A copy of ``policy`` with a deny cache of its own, as another process has, on ``clock``."""
    other = copy.copy(policy)
    other.denials = DenyCache(
        10, 60, clock, read_token=reset_epoch.read_token, check_interval=reset_epoch.CHECK_INTERVAL
    )
    return other


def test_other_processes_honour_a_reset_within_the_check_interval(policy, redis_client, clock):
    other = other_process(policy, clock)
    use_up(policy)
    assert not other.hit(ID).allowed  # the first denial: the token is read
    assert not other.hit(ID).allowed  # denied by Redis, remembered
    sent = commands_sent(redis_client, lambda: other.hit(ID))
    assert sent == {"info": 0}  # from its cache
    policy.reset(ID)
    clock.now += reset_epoch.CHECK_INTERVAL - 0.001
    assert other.hit(ID).allowed is False  # the token was read less than 1 s ago
    clock.now += 0.001
    decision = other.hit(ID)  # reads the token: another one; the entry goes
    assert (decision.allowed, decision.remaining) == (True, 2)
    assert other.denials.token_reads == 2


def test_a_flush_is_honoured_within_the_check_interval(policy, redis_client, clock):
    other = other_process(policy, clock)
    use_up(policy)
    assert [other.hit(ID).allowed for _ in range(2)] == [False, False]
    redis_client.flushdb()  # what Django's cache.clear() sends through django-redis
    assert other.hit(ID).allowed is False
    clock.now += reset_epoch.CHECK_INTERVAL
    assert other.hit(ID).allowed  # the token is gone: a change
    # A second flush removes the token the read wrote: seen too.
    redis_client.flushdb()
    use_up(policy)
    assert [other.hit(ID).allowed for _ in range(2)] == [False, False]
    redis_client.flushdb()
    clock.now += reset_epoch.CHECK_INTERVAL
    assert other.hit(ID).allowed


def test_the_token_is_read_at_most_once_per_interval_however_long_the_flood(
    policy, redis_client, clock
):
    other = other_process(policy, clock)
    use_up(policy)
    assert [other.hit(ID).allowed for _ in range(2)] == [False, False]
    reads = other.denials.token_reads
    start = clock.now

    def ten_seconds_of_flood():
        for i in range(20_000):  # 2,000 hits a second
            clock.now = start + i / 2_000
            assert other.hit(ID).allowed is False

    sent = commands_sent(redis_client, ten_seconds_of_flood)
    # One token read a second (the first at 1 s), and no hit sent.
    assert other.denials.token_reads - reads == 9
    # (commandstats also counts the GET the script runs inside each EVALSHA)
    assert sent == {"info": 0, "evalsha": 9, "get": 9}
    assert 0 < redis_client.pttl("rl:~epoch") <= reset_epoch.TOKEN_TTL_MS


def test_a_process_that_answers_no_denial_reads_no_token(policy, redis_client):
    use_up(policy)  # allowed only: no denial to vouch for
    assert policy.denials.token_reads == 0
    assert not redis_client.exists("rl:~epoch")


def test_peek_always_asks_redis(policy, redis_client):
    use_up(policy)
    policy.hit(ID)
    sent = commands_sent(redis_client, lambda: policy.peek(ID))
    assert sent.keys() - {"info"}


@pytest.mark.parametrize("name", ["sliding_log", "token_bucket", "gcra", "sliding_window"])
def test_a_heavier_denial_is_not_remembered(settings, redis_client, name):
    settings.DJANGO_RL = {"POLICIES": {"p": ALGORITHMS[name]}}
    policy = get_policy("p")
    assert policy.hit(ID, cost=2).allowed
    assert not policy.hit(ID, cost=2).allowed
    # One unit is left, and Redis is asked: the cost-2 denial said nothing about it.
    decision = policy.hit(ID)
    assert (decision.allowed, decision.remaining) == (True, 0)
    # A denial of cost 1 does not answer a hit of cost 2 either.
    assert not policy.hit(ID).allowed
    sent = commands_sent(redis_client, lambda: policy.hit(ID, cost=2))
    assert sent["evalsha"] == 1


def test_a_fixed_window_denial_answers_every_cost(settings, redis_client):
    settings.DJANGO_RL = {"POLICIES": {"p": ALGORITHMS["fixed_window"]}}
    policy = get_policy("p")
    policy.denials.read_baseline()  # else the first denial only reads the reset token
    use_up(policy)
    assert not policy.hit(ID).allowed
    sent = commands_sent(redis_client, lambda: policy.hit(ID, cost=3))
    assert sent == {"info": 0}


def test_the_cache_ends_by_the_time_redis_would_allow(settings, redis_client):
    # A token every 100 ms: the denial is remembered for less than 100 ms.
    settings.DJANGO_RL = {
        "POLICIES": {"p": {"algorithm": "token_bucket", "capacity": 1, "rate": "10/s"}}
    }
    policy = get_policy("p")
    policy.denials.read_baseline()
    assert policy.hit(ID).allowed
    sent_at = server_ms(redis_client)
    denial = policy.hit(ID)
    assert not denial.allowed
    assert policy.key(ID) in policy.denials
    sleep_until(redis_client, sent_at + int(denial.retry_after * 1000) + 5)
    assert policy.hit(ID).allowed


def test_degraded_denials_are_not_remembered(settings):
    settings.DJANGO_RL = {**settings.DJANGO_RL, "FAIL_OPEN": False}
    with override_settings(CACHES=caches_for(f"redis://127.0.0.1:{free_port()}/0")):
        policy = get_policy("login")
        assert policy.hit(ID).degraded
    assert len(policy.denials) == 0


def test_size_zero_turns_it_off(settings, redis_client):
    settings.DJANGO_RL = {"DENY_CACHE_SIZE": 0, "POLICIES": {"p": ALGORITHMS["sliding_log"]}}
    policy = get_policy("p")
    assert (policy.denials, get_deny_cache()) == (None, None)
    use_up(policy)
    sent = commands_sent(redis_client, lambda: [policy.hit(ID) for _ in range(5)])
    assert sent["evalsha"] == 5


def test_changed_settings_start_an_empty_cache(settings, redis_server):
    before = get_deny_cache()
    settings.DJANGO_RL = {**settings.DJANGO_RL}
    after_rl = get_deny_cache()
    with override_settings(CACHES=caches_for(redis_server.url.removesuffix("/0") + "/4")):
        after_caches = get_deny_cache()
    assert len({id(before), id(after_rl), id(after_caches)}) == 3


def test_settings_size_and_max_age(settings):
    settings.DJANGO_RL = {"DENY_CACHE_SIZE": 5, "DENY_CACHE_MAX_AGE": 2.5}
    cache = get_deny_cache()
    assert (cache.max_entries, cache.max_age) == (5, 2.5)


@pytest.mark.parametrize(
    ("rl", "expected"),
    [
        (
            {"DENY_CACHE_SIZE": -1},
            Error(
                "DJANGO_RL['DENY_CACHE_SIZE'] is -1",
                hint="It must be a whole number from 0 (no deny cache) to 1,000,000: "
                "the most denials each process remembers.",
                id="django_rl.E040",
            ),
        ),
        (
            {"DENY_CACHE_SIZE": True},
            Error(
                "DJANGO_RL['DENY_CACHE_SIZE'] is True",
                hint="It must be a whole number from 0 (no deny cache) to 1,000,000: "
                "the most denials each process remembers.",
                id="django_rl.E040",
            ),
        ),
        *[
            (
                {"DENY_CACHE_MAX_AGE": age},
                Error(
                    f"DJANGO_RL['DENY_CACHE_MAX_AGE'] is {age!r}",
                    hint="It must be a number of seconds above 0 and at most 86,400: "
                    "how long a process may answer a denial without asking Redis again.",
                    id="django_rl.E041",
                ),
            )
            for age in (0, -5, "60", float("nan"), 86_401, None)
        ],
    ],
)
def test_bad_settings_are_reported(settings, rl, expected):
    settings.ROOT_URLCONF = "tests.sites.urls_without_limits"
    settings.DJANGO_RL = rl
    assert check_settings() == [expected]
