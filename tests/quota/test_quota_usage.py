"""A quota read by ``usage`` and the status view: counted nothing, the period's
length as ``window``, ``reset`` at the period's end; with other algorithms, one
round trip."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import jsonschema
from django.contrib.auth.models import AnonymousUser
from django.test import Client, RequestFactory

import django_rl
from django_rl import get_policy
from tests.support.redis_server import RedisServer

ZONE = "Asia/Kolkata"
ADDRESS = "198.51.100.9"
POLICIES = {
    "daily": {"algorithm": "quota", "limit": 100, "period": "day", "timezone": ZONE, "key": "ip"},
    "yearly": {"algorithm": "quota", "limit": 9000, "period": "year", "key": "ip"},
    "fw": {"algorithm": "fixed_window", "rate": "10/h", "key": "ip"},
    "log": {"algorithm": "sliding_log", "rate": "10/h", "key": "ip"},
    "bucket": {"algorithm": "token_bucket", "capacity": 10, "rate": "10/h", "key": "ip"},
}
SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "docs/schemas/rate_limit_status.schema.json").read_text()
)


def anonymous() -> Any:
    request = RequestFactory().get("/", REMOTE_ADDR=ADDRESS)
    request.user = AnonymousUser()
    return request


def day_end() -> float:
    today = dt.datetime.now(ZoneInfo(ZONE)).date() + dt.timedelta(days=1)
    return dt.datetime(today.year, today.month, today.day, tzinfo=ZoneInfo(ZONE)).timestamp()


def test_the_status_view_reads_a_quota_without_counting_it(settings: Any) -> None:
    settings.DJANGO_RL = {"POLICIES": POLICIES, "HISTORY": False}
    settings.ROOT_URLCONF = "tests.sites.urls_status"
    for _ in range(3):
        get_policy("daily").hit(f"ip:{ADDRESS}")
    for _ in range(3):
        data = json.loads(Client(REMOTE_ADDR=ADDRESS).get("/rate_limit/").content)
    jsonschema.validate(data, SCHEMA)
    daily = data["policies"]["daily"]
    assert (daily["limit"], daily["remaining"], daily["window"]) == (100, 97, 86_400)
    assert abs(daily["reset"] - day_end()) <= 2
    yearly = data["policies"]["yearly"]
    year = dt.date.today().year
    days = (dt.date(year + 1, 1, 1) - dt.date(year, 1, 1)).days
    assert (yearly["remaining"], yearly["window"]) == (9000, days * 86_400)
    assert get_policy("daily").peek(f"ip:{ADDRESS}").remaining == 97


def test_usage_of_quotas_and_three_other_algorithms_is_one_round_trip(
    settings: Any, private_redis: RedisServer
) -> None:
    settings.DJANGO_RL = {"POLICIES": POLICIES, "HISTORY": False, "DENY_CACHE_SIZE": 0}
    admin = private_redis.client()
    names = list(POLICIES)
    for name in names:
        get_policy(name).hit(f"ip:{ADDRESS}")
    django_rl.usage(anonymous(), names)  # connected, scripts loaded

    def reads() -> int:
        return int(admin.info("stats")["total_reads_processed"])

    before = reads()
    decisions = django_rl.usage(anonymous(), names)
    assert reads() - before == 1 + 1  # the usage, and the second INFO
    assert [d.remaining for d in decisions] == [99, 8999, 9, 9, 9]
    assert decisions[0].window == 86_400 and time.time() + decisions[0].reset_after > day_end() - 2
    admin.close()
