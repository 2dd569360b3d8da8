"""Settings are read lazily, re-read on change; get_policy's errors are clear."""

from __future__ import annotations

import dataclasses

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_rl import Decision, Policy, get_policy
from django_rl.conf import get_settings
from django_rl.exceptions import UnknownPolicy


def test_get_policy_returns_the_configured_policy():
    policy = get_policy("login")
    assert isinstance(policy, Policy)
    assert (policy.name, policy.limit, policy.algorithm.name) == ("login", 5, "sliding_log")
    assert get_policy("login") is policy  # built once


def test_unknown_policy_names_the_known_ones():
    with pytest.raises(UnknownPolicy) as info:
        get_policy("logn")
    assert isinstance(info.value, ImproperlyConfigured)
    assert str(info.value) == (
        "No rate-limit policy named 'logn'. Known policies: 'api', 'burst', 'login', "
        "'per_minute', 'writes'. Define it in settings.DJANGO_RL['POLICIES'] or with "
        "django_rl.register_policy()."
    )


def test_settings_fixture_changes_the_limit(settings, redis_client):
    from tests.conftest import start_of_fresh_window

    start_of_fresh_window(redis_client, 60_000, min_left_ms=5_000)  # 'writes' counts per minute
    assert [get_policy("writes").hit("ip:1").allowed for _ in range(3)] == [True, True, False]
    settings.DJANGO_RL = {
        "POLICIES": {"writes": {"algorithm": "fixed_window", "rate": "3/m", "key": "ip"}}
    }
    assert get_policy("writes").limit == 3
    assert [get_policy("writes").hit("ip:1").allowed for _ in range(4)] == [True] * 3 + [False]


def test_override_settings_changes_prefix_and_defaults():
    with override_settings(DJANGO_RL={"KEY_PREFIX": "other", "POLICIES": {}}):
        assert get_settings().key_prefix == "other"
        assert get_settings().fail_open is True
        with pytest.raises(UnknownPolicy, match="Known policies: none"):
            get_policy("login")
    assert get_settings().key_prefix == "rl"
    assert get_policy("login").limit == 5


def test_a_broken_policy_raises_its_check_error_and_spares_the_others(settings):
    settings.DJANGO_RL = {
        "POLICIES": {
            "bad": {"algorithm": "fixed_window", "rate": "5/mango"},
            "good": {"algorithm": "fixed_window", "rate": "5/m"},
        }
    }
    with pytest.raises(ImproperlyConfigured, match=r"unknown period unit 'mango'.*django_rl\.E007"):
        get_policy("bad")
    assert isinstance(get_policy("good").hit("ip:1"), Decision)


def test_broken_top_level_settings_raise_on_use(settings):
    settings.DJANGO_RL = {"POLICY": {}}
    with pytest.raises(ImproperlyConfigured, match=r"unknown keys: 'POLICY'.*django_rl\.E001"):
        get_policy("login")


def test_decision_is_frozen():
    decision = get_policy("login").hit("ip:1")
    with pytest.raises(AttributeError):
        decision.allowed = False  # type: ignore[misc]


def test_decision_is_built_as_its_dataclass_declares():
    """Decision's own faster __init__ (core/decision.py) keeps the dataclass's contract."""
    fields = [f.name for f in dataclasses.fields(Decision)]
    assert fields == [
        "allowed", "limit", "remaining", "retry_after", "reset_after", "policy",
        "degraded", "window", "fallback", "shadow", "lease",
    ]  # fmt: skip
    positional = Decision(False, 5, 1, 2.5, 3.5, "p", True, 60, True, True)
    assert [getattr(positional, name) for name in fields] == [
        False, 5, 1, 2.5, 3.5, "p", True, 60, True, True, None,
    ]  # fmt: skip
    defaults = Decision(
        allowed=True, limit=5, remaining=4, retry_after=0.0, reset_after=1.0, policy="p"
    )
    assert (defaults.degraded, defaults.window, defaults.fallback, defaults.shadow) == (
        False, None, False, False,
    )  # fmt: skip
    assert defaults.lease is None
    assert dataclasses.replace(defaults, shadow=True) == Decision(
        True, 5, 4, 0.0, 1.0, "p", shadow=True
    )
    assert defaults != dataclasses.replace(defaults, remaining=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        defaults.remaining = 0  # type: ignore[misc]
    with pytest.raises(TypeError):
        Decision(True, 5, 4, 0.0, 1.0)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Decision(True, 5, 4, 0.0, 1.0, "p", colour="red")  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("retry_after", "header"), [(0.0, 1), (0.001, 1), (1.0, 1), (1.001, 2), (41.2, 42)]
)
def test_retry_after_header_is_whole_seconds_rounded_up_at_least_one(retry_after, header):
    decision = Decision(False, 5, 0, retry_after, retry_after, "p")
    assert decision.retry_after_header == header
