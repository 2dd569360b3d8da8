"""A quota works with everything a policy has: costs, overrides, per-plan quotas,
shadow mode, the outage fallback, metrics, several policies together, async,
peek and reset, ``ratelimit inspect`` and the admin's live counters, memory."""

from __future__ import annotations

import asyncio
import datetime as dt
import io
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis
from django.core.management import call_command
from django.utils import timezone

from django_rl import ahit_many, get_policy, hit_many
from django_rl.exceptions import ConfigurationError
from django_rl.models import Override
from django_rl.overrides import LOADER, normalize_target
from tests.support.redis_server import RedisServer

ID = "ip:192.0.2.40"
ZONE = "Australia/Sydney"
QUOTA = {"algorithm": "quota", "limit": 5, "period": "month", "timezone": ZONE, "key": "ip"}


def plan_quota(request: Any) -> str | None:
    plan = request.META.get("HTTP_X_PLAN")
    return {"free": "2", "pro": "4/day"}.get(plan) if plan != "none" else None


POLICIES = {
    "q": QUOTA,
    "q2": {**QUOTA, "limit": 3, "period": "day", "timezone": "Europe/London"},
    "shadowed": {**QUOTA, "mode": "shadow"},
    "plans": {**{k: v for k, v in QUOTA.items() if k != "limit"}, "rate": plan_quota},
    "backup": {**QUOTA, "fallback_rate": "2/h"},
    "log": {"algorithm": "sliding_log", "rate": "10/h", "key": "ip"},
}


@pytest.fixture(autouse=True)
def _policies(settings: Any) -> None:
    settings.DJANGO_RL = {"POLICIES": POLICIES}


def month_end(now: dt.datetime | None = None) -> float:
    local = (now or dt.datetime.now(dt.timezone.utc)).astimezone(ZoneInfo(ZONE))
    year, month = (local.year, local.month + 1) if local.month < 12 else (local.year + 1, 1)
    return dt.datetime(year, month, 1, tzinfo=ZoneInfo(ZONE)).timestamp()


def test_costs_count_and_a_denial_counts_nothing(redis_client: redis.Redis) -> None:
    policy = get_policy("q")
    assert policy.hit(ID, cost=3).remaining == 2
    denied = policy.hit(ID, cost=3)
    assert not denied.allowed and denied.remaining == 2
    assert policy.hit(ID, cost=2).remaining == 0
    with pytest.raises(ValueError, match="above the limit"):
        policy.hit(ID, cost=6)
    (key,) = redis_client.keys("rl:q:*")
    assert int(redis_client.get(key)) == 5
    # Retry-After and reset run to the month's end; window is the month's length.
    denied = policy.hit(ID)
    left = month_end() - dt.datetime.now(dt.timezone.utc).timestamp()
    assert denied.retry_after == pytest.approx(left, abs=2)
    assert denied.window in {28 * 86400 + h for h in (-3600, 0, 3600)} | {
        d * 86400 + h for d in (29, 30, 31) for h in (-3600, 0, 3600)
    }


def test_memory_per_key_net_of_its_name(redis_client: redis.Redis) -> None:
    policy = get_policy("q")
    for i in range(20):
        policy.hit(f"ip:192.0.2.{i}", cost=1 + i % 5)
    keys = redis_client.keys("rl:q:*")
    assert len(keys) == 20  # one key per identity and period
    sizes = [redis_client.memory_usage(key) - len(key) for key in keys]
    assert max(sizes) <= 100, sizes


def test_the_ttl_ends_between_the_periods_end_and_a_day_after(redis_client: redis.Redis) -> None:
    get_policy("q").hit(ID)
    (key,) = redis_client.keys("rl:q:*")
    left_ms = (month_end() - dt.datetime.now(dt.timezone.utc).timestamp()) * 1000
    assert left_ms - 2000 <= redis_client.pttl(key) <= left_ms + 86_400_000


def test_several_policies_together_all_or_nothing(redis_client: redis.Redis) -> None:
    for _ in range(3):
        assert all(d.allowed for d in hit_many([("q", ID, 1), ("q2", ID, 1), ("log", ID, 1)]))
    decisions = hit_many([("q", ID, 1), ("q2", ID, 1), ("log", ID, 1)])
    assert [d.allowed for d in decisions] == [True, False, True]  # q2's 3 a day: all denied
    assert get_policy("q").peek(ID).remaining == 2  # nothing counted for the denied request
    assert decisions[1].window in (82_800, 86_400, 90_000)
    assert decisions[0].window >= 28 * 86_400 - 3600


def test_async_hits_write_the_sync_keys(redis_client: redis.Redis) -> None:
    policy = get_policy("q")

    async def run() -> list[Any]:
        first = [await policy.ahit(ID) for _ in range(3)]
        together = await ahit_many([("q", ID, 1), ("q2", ID, 1)])
        return [*first, *together, await policy.apeek(ID)]

    *hits, q, q2, peeked = asyncio.run(run())
    assert [d.remaining for d in hits] == [4, 3, 2] and q.remaining == 1 and q2.remaining == 2
    assert peeked.remaining == 1 and peeked.window == q.window == hits[0].window
    policy.hit(ID)
    assert not policy.hit(ID).allowed
    assert len(redis_client.keys("rl:q:*")) == 1
    assert policy.reset(ID) >= 1
    assert policy.peek(ID).remaining == 5


def test_shadow_counts_and_never_denies() -> None:
    policy = get_policy("shadowed")
    decisions = [policy.hit(ID) for _ in range(7)]
    assert [d.allowed for d in decisions] == [True] * 5 + [False] * 2
    assert all(d.shadow for d in decisions) and not any(d.denies for d in decisions)


def override(policy: str, action: str, rate: str = "") -> None:
    Override.objects.create(
        policy=policy, identity=normalize_target(ID), action=action, rate=rate,
        expires_at=timezone.now() + dt.timedelta(minutes=10), reason="tests",
    )  # fmt: skip
    assert LOADER.load()


@pytest.mark.django_db
def test_overrides_exempt_block_and_rate(redis_client: redis.Redis) -> None:
    override("q", "exempt")
    assert all(get_policy("q").hit(ID).allowed for _ in range(10))
    assert redis_client.keys("rl:q:*") == []
    Override.objects.all().delete()
    override("q", "block")
    assert not get_policy("q").hit(ID).allowed
    Override.objects.all().delete()
    override("q", "rate", "2/day")  # the identity's own quota: 2 a day
    decisions = [get_policy("q").hit(ID) for _ in range(3)]
    assert [d.allowed for d in decisions] == [True, True, False]
    assert decisions[0].limit == 2 and decisions[0].window in (82_800, 86_400, 90_000)


def test_per_plan_quotas(rf: Any) -> None:
    policy = get_policy("plans")

    def spend(plan: str, n: int) -> list[bool]:
        request = rf.get("/", HTTP_X_PLAN=plan, REMOTE_ADDR="192.0.2.41")
        return [policy.hit_request(request).allowed for _ in range(n)]  # type: ignore[union-attr]

    assert spend("free", 3) == [True, True, False]
    assert spend("pro", 5) == [True] * 4 + [False]
    request = rf.get("/", HTTP_X_PLAN="none", REMOTE_ADDR="192.0.2.41")
    assert policy.hit_request(request) is None  # no limit for that plan
    request = rf.get("/", HTTP_X_PLAN="pro", REMOTE_ADDR="192.0.2.41")
    assert policy.hit_request(request).window in (82_800, 86_400, 90_000)  # type: ignore[union-attr]


def test_a_bad_plan_quota_is_a_configuration_error(settings: Any, rf: Any) -> None:
    settings.DJANGO_RL = {
        "POLICIES": {"bad": {**POLICIES["plans"], "rate": lambda request: "5/fortnight"}}
    }
    with pytest.raises(ConfigurationError, match="5/fortnight"):
        get_policy("bad").hit_request(rf.get("/", REMOTE_ADDR="192.0.2.41"))


def test_the_fallback_counts_in_this_process_while_redis_is_down(
    settings: Any, private_redis: RedisServer
) -> None:
    policy = get_policy("backup")
    assert policy.hit(ID).allowed
    private_redis.stop()
    decisions = [policy.hit(ID) for _ in range(3)]
    assert [d.allowed for d in decisions] == [True, True, False]
    assert all(d.degraded and d.fallback for d in decisions)
    assert policy.peek(ID).fallback


def test_metrics_count_quota_decisions() -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    registry = prometheus_client.REGISTRY

    def value(result: str) -> float:
        labels = {"policy": "q", "result": result}
        return registry.get_sample_value("django_rl_decisions_total", labels) or 0.0

    allowed, denied = value("allowed"), value("denied")
    for _ in range(6):
        get_policy("q").hit(ID)
    assert (value("allowed") - allowed, value("denied") - denied) == (5, 1)


def ratelimit(*args: str) -> str:
    out = io.StringIO()
    call_command("ratelimit", *args, stdout=out)
    return out.getvalue()


def test_inspect_shows_the_period_in_the_policys_time_zone() -> None:
    get_policy("q").hit(ID, cost=2)
    text = ratelimit("inspect", "q", ID)
    local = dt.datetime.now(ZoneInfo(ZONE))
    assert f"month {local:%Y-%m}-01 00:00 to " in text and f"({ZONE})" in text
    assert "quota 5/month Australia/Sydney" in text


def test_the_admins_live_counters_show_the_period(admin_client: Any) -> None:
    get_policy("q").hit(ID, cost=2)
    data = admin_client.get("/admin/django_rl/livecounter/data/").json()
    (row,) = [r for r in data["rows"] if r["policy"] == "q"]
    assert (row["algorithm"], row["used"], row["remaining"], row["limit"]) == ("quota", 2, 3, 5)
    assert row["rate"] == "5/month"
    local = dt.datetime.now(ZoneInfo(ZONE))
    assert row["detail"].startswith(f"month {local:%Y-%m}-01 00:00 to ")
    assert row["detail"].endswith(f"({ZONE})")


@pytest.mark.topologies
def test_across_cluster_slots_a_denial_takes_back_the_quota_counted(redis_cluster: Any) -> None:
    from django.test import override_settings

    with override_settings(CACHES=redis_cluster.caches(), DJANGO_RL={"POLICIES": POLICIES}):
        redis_cluster.flush()
        q, q2 = get_policy("q"), get_policy("q2")
        first, second = "ip:10.0.0.1", "ip:10.0.0.2"
        backend = q.backend
        assert backend.slot_of(q.key(first)) != backend.slot_of(q2.key(second))
        for _ in range(3):
            q2.hit(second)  # q2's 3 a day spent: it denies every later hit
        for _ in range(3):
            decisions = hit_many([("q", first, 1), ("q2", second, 1)])
            assert [d.allowed for d in decisions] == [True, False]
        assert q.peek(first).remaining == 5  # each reserved hit taken back
        assert [d.allowed for d in hit_many([("q", first, 5)])] == [True]
        redis_cluster.flush()


def test_a_calendar_fallback_counts_per_period_of_the_quotas_time_zone(
    settings: Any, private_redis: RedisServer
) -> None:
    import time_machine

    spec = {**QUOTA, "limit": 100, "period": "month", "fallback_rate": "2/day"}
    settings.DJANGO_RL = {"CLOCK": "app", "POLICIES": {"cal": spec}}
    policy = get_policy("cal")
    assert policy.fallback is not None and policy.fallback.calendar is not None
    private_redis.stop()
    # 23:59:30 in Sydney on the day daylight saving ends (2026-04-05, 25 hours).
    before = dt.datetime(2026, 4, 5, 23, 59, 30, tzinfo=ZoneInfo(ZONE))
    with time_machine.travel(before, tick=False) as traveller:
        decisions = [policy.hit(ID) for _ in range(3)]
        assert [d.allowed for d in decisions] == [True, True, False]
        assert all(d.fallback for d in decisions)
        assert decisions[2].retry_after == 30.0 and decisions[2].window == 90_000
        traveller.shift(30)  # local midnight: a new day, a new local count
        after = policy.hit(ID)
        assert after.allowed and after.remaining == 1 and after.window == 86_400


def test_a_calendar_fallback_is_checked(settings: Any) -> None:
    from django_rl.checks.system import check_settings

    settings.ROOT_URLCONF = "tests.sites.urls_without_limits"
    settings.DJANGO_RL = {
        "POLICIES": {
            "good": {**QUOTA, "fallback_rate": "500/month"},
            "year": {**QUOTA, "fallback_rate": "5000/year"},
            "bad": {**QUOTA, "fallback_rate": "0/month"},
        }
    }
    assert [(e.id, e.msg.split(":")[0]) for e in check_settings()] == [
        ("django_rl.E031", "DJANGO_RL['POLICIES']['bad']['fallback_rate']")
    ]


def test_an_unused_period_is_full_reset_after_zero_then_its_end() -> None:
    policy = get_policy("q")
    fresh = policy.peek(ID)
    assert (fresh.allowed, fresh.remaining, fresh.reset_after) == (True, 5, 0.0)
    used = policy.hit(ID)
    left = month_end() - dt.datetime.now(dt.timezone.utc).timestamp()
    assert used.reset_after == pytest.approx(left, abs=2)
    assert policy.peek(ID).reset_after == pytest.approx(left, abs=2)


def test_decisions_made_without_redis_carry_the_current_periods_length(
    settings: Any, private_redis: RedisServer
) -> None:
    import time_machine

    spec = {**QUOTA, "period": "day", "fail_open": True}
    settings.DJANGO_RL = {"CLOCK": "app", "POLICIES": {"open": spec}}
    private_redis.stop()
    # 2026-10-04 in Sydney: daylight saving starts, a 23-hour day.
    with time_machine.travel(dt.datetime(2026, 10, 4, 12, tzinfo=ZoneInfo(ZONE)), tick=False):
        degraded = get_policy("open").hit(ID)
    assert degraded.degraded and degraded.allowed and degraded.window == 23 * 3600
