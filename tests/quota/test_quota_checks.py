"""A quota's bad input: a check error naming the policy and the key, with a hint;
``ConfigurationError`` when the policy is used."""

from __future__ import annotations

from typing import Any

import pytest

from django_rl import get_policy
from django_rl.checks.system import check_settings
from django_rl.exceptions import ConfigurationError

GOOD = {"algorithm": "quota", "limit": 100, "period": "month", "key": "ip"}


def problems(settings: Any, **spec: Any) -> list[Any]:
    settings.ROOT_URLCONF = "tests.sites.urls_without_limits"
    settings.DJANGO_RL = {"POLICIES": {"api": {**GOOD, **spec}}}
    return check_settings()


@pytest.mark.parametrize(
    ("spec", "key", "shown"),
    [
        ({"timezone": "Mars/Olympus_Mons"}, "timezone", "'Mars/Olympus_Mons'"),
        ({"timezone": ""}, "timezone", "''"),
        ({"timezone": 5}, "timezone", "5"),
        ({"timezone": "../../etc/passwd"}, "timezone", "'../../etc/passwd'"),
        ({"anchor": 29}, "anchor", "29"),
        ({"anchor": 0}, "anchor", "0"),
        ({"anchor": "1"}, "anchor", "'1'"),
        ({"anchor": True}, "anchor", "True"),
        ({"period": "week", "anchor": 8}, "anchor", "8"),
        ({"period": "day", "anchor": 1}, "anchor", "set"),
        ({"period": "year", "anchor": 3}, "anchor", "set"),
        ({"period": "fortnight"}, "period", "'fortnight'"),
        ({"period": "Day"}, "period", "'Day'"),
        ({"limit": -1}, "limit", "-1"),
        ({"limit": 1_000_000_001}, "limit", "1000000001"),
        ({"limit": 10**40}, "limit", "1000000000"),
        ({"limit": 1.5}, "limit", "1.5"),
        ({"limit": "100"}, "limit", "'100'"),
        ({"limit": None}, "limit", "None"),
    ],
)
def test_a_bad_key_is_a_check_error_and_a_configuration_error_on_use(
    settings: Any, spec: dict[str, Any], key: str, shown: str
) -> None:
    (error,) = problems(settings, **spec)
    assert error.id == "django_rl.E010"
    assert error.msg.startswith(f"DJANGO_RL['POLICIES']['api']['{key}'] ")
    assert shown in error.msg
    assert error.hint and f"'{key}'" in error.hint
    with pytest.raises(ConfigurationError, match=r"\['api'\]\['" + key + r"'\].*django_rl\.E010"):
        get_policy("api").hit("ip:192.0.2.1")


@pytest.mark.parametrize("missing", ["limit", "period"])
def test_limit_and_period_are_required(settings: Any, missing: str) -> None:
    settings.ROOT_URLCONF = "tests.sites.urls_without_limits"
    spec = {k: v for k, v in GOOD.items() if k != missing}
    settings.DJANGO_RL = {"POLICIES": {"api": spec}}
    (error,) = check_settings()
    assert error.id == "django_rl.E008" and repr(missing) in error.msg


def test_a_quotas_rate_is_a_quota_not_a_rate(settings: Any) -> None:
    (error,) = problems(settings, rate="5/m")
    assert error.id == "django_rl.E010" and error.msg.startswith(
        "DJANGO_RL['POLICIES']['api']['rate'] is '5/m'"
    )
    assert error.hint and "'10000/month'" in error.hint
    assert problems(settings, rate="10/day") == []  # stands for limit and period
    assert get_policy("api").algorithm.description.startswith("quota 10/day")


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"limit": 0},
        {"limit": 1_000_000_000},
        {"period": "day", "timezone": "Australia/Sydney"},
        {"period": "week", "anchor": 7, "timezone": "UTC"},
        {"period": "month", "anchor": 28},
        {"period": "year"},
    ],
)
def test_good_specs_are_clean(settings: Any, spec: dict[str, Any]) -> None:
    assert problems(settings, **spec) == []


def test_the_time_zone_defaults_to_settings_time_zone(settings: Any) -> None:
    settings.TIME_ZONE = "Asia/Tokyo"
    assert problems(settings) == []
    assert "Asia/Tokyo" in get_policy("api").algorithm.description


def test_a_limit_of_zero_denies_every_hit_until_the_period_ends_without_redis(
    settings: Any,
) -> None:
    problems(settings, limit=0, period="day", timezone="UTC")
    decision = get_policy("api").hit("ip:192.0.2.1")
    assert not decision.allowed and decision.limit == 0
    assert 0 < decision.retry_after <= 86_400 and decision.window == 86_400


def test_the_server_check_runs_a_trial_quota_under_the_documented_acl_and_leaves_no_key(
    settings: Any, private_redis: Any
) -> None:
    from django_rl.checks.acl import acl_rule
    from django_rl.checks.server_checks import check_server
    from tests.support.redis_server import caches_for

    admin = private_redis.client()
    admin.execute_command("ACL", "SETUSER", "checker", *acl_rule().split(), "+config|get", ">pw")
    url = f"redis://checker:pw@127.0.0.1:{private_redis.port}/0?client_name=django_rl_quota"
    settings.CACHES = caches_for(url, SOCKET_CONNECT_TIMEOUT=1, SOCKET_TIMEOUT=1)
    settings.DJANGO_RL = {"POLICIES": {"api": GOOD}}
    assert [(m.id, m.msg) for m in check_server()] == []
    assert admin.keys("*") == []
    admin.close()
