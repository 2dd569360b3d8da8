"""The django-ratelimit drop-in at run time: its settings as they stand, its metrics, its outages.

* ``RATELIMIT_*`` settings are read at each call, as the original reads
  them: a plain assignment to ``django.conf.settings`` and
  ``mock.patch.object`` (which send no ``setting_changed``) hold at once.
* Every counted call is a decision in ``django_rl_decisions_total`` under
  ``@<group>``, with the results of every other decision (read back with
  prometheus_client's own registry and parser), as are the DRF drop-in's.
* While calls cannot be counted, one WARNING per outage names
  ``RATELIMIT_FAIL_OPEN`` (the drop-in keeps the original's default, False).
"""

from __future__ import annotations

import logging
import time
from unittest import mock

import pytest
from django.conf import settings as django_settings
from django.test import RequestFactory, override_settings
from prometheus_client import REGISTRY
from rest_framework.test import APIRequestFactory

from django_rl.contrib.drf import AnonRateThrottle
from django_rl.contrib.ratelimit import conf, store
from django_rl.contrib.ratelimit.core import get_usage, group_of, is_ratelimited
from django_rl.contrib.ratelimit.decorators import ratelimit
from django_rl.contrib.ratelimit.exceptions import Ratelimited
from django_rl.policies.inline import policy_name
from tests.conftest import start_of_fresh_window

rf = RequestFactory()
RESULTS = ("allowed", "denied", "shadow_denied", "degraded_allowed", "degraded_denied")


@pytest.fixture(autouse=True)
def _fresh(redis_client):
    """A minute's window with time to spare; the drop-in's policies forgotten after."""
    start_of_fresh_window(redis_client, 60_000, min_left_ms=5_000)
    yield
    store.forget_policies()


def decisions(policy: str) -> dict[str, float]:
    """Return ``django_rl_decisions_total`` of ``policy`` by result, as the registry reads now."""
    return {
        r: REGISTRY.get_sample_value("django_rl_decisions_total", {"policy": policy, "result": r})
        or 0.0
        for r in RESULTS
    }


def counted_since(before: dict[str, float], policy: str) -> dict[str, float]:
    """Return the results of ``policy`` counted since ``before`` (those that moved)."""
    after = decisions(policy)
    return {r: after[r] - before[r] for r in RESULTS if after[r] != before[r]}


def limited_view(group: str, rate: str = "1/m", key: str = "ip"):
    @ratelimit(group=group, key=key, rate=rate, block=False)
    def view(request):
        return request.limited

    return view


# --- settings read at each call --------------------------------------------


def test_a_plain_assignment_to_settings_holds_at_once():
    view = limited_view("rt-plain")
    assert [view(rf.get("/")) for _ in range(2)] == [False, True]
    assert not hasattr(django_settings, "RATELIMIT_ENABLE")
    django_settings.RATELIMIT_ENABLE = False
    try:
        assert view(rf.get("/")) is False
        assert get_usage(rf.get("/"), group="rt-plain", key="ip", rate="1/m") is None
    finally:
        del django_settings.RATELIMIT_ENABLE
    assert view(rf.get("/")) is True
    usage = get_usage(rf.get("/"), group="rt-plain", key="ip", rate="1/m")
    assert usage["count"] == 3  # the call made while disabled was not counted


def test_mock_patch_object_of_settings_holds_at_once():
    view = limited_view("rt-patch")
    assert view(rf.get("/")) is False
    with mock.patch.object(django_settings, "RATELIMIT_ENABLE", False, create=True):
        assert [view(rf.get("/")) for _ in range(3)] == [False] * 3
    assert view(rf.get("/")) is True


def test_a_plain_assignment_on_top_of_override_settings(settings):
    # pytest-django's fixture swaps in an override holder; a plain
    # assignment then lands in that holder, and deleting it falls back.
    settings.RATELIMIT_IPV4_MASK = 32
    view = limited_view("rt-mask")
    assert view(rf.get("/", REMOTE_ADDR="10.1.1.1")) is False
    assert view(rf.get("/", REMOTE_ADDR="10.1.2.2")) is False  # another address: its own count
    django_settings.RATELIMIT_IPV4_MASK = 16
    try:
        assert view(rf.get("/", REMOTE_ADDR="10.1.3.3")) is False  # counted as 10.1.0.0
        assert view(rf.get("/", REMOTE_ADDR="10.1.4.4")) is True
    finally:
        del django_settings.RATELIMIT_IPV4_MASK
    # Deleted from the override: 32 (the default) again, not the 16 set before.
    assert view(rf.get("/", REMOTE_ADDR="10.1.5.5")) is False
    with mock.patch.object(django_settings, "RATELIMIT_FAIL_OPEN", True, create=True):
        assert conf.fail_open() is True
    assert conf.fail_open() is False


@pytest.mark.parametrize("layers", [0, 1, 2])
def test_setting_reads_what_getattr_reads_however_settings_are_layered(layers):
    names = ("RATELIMIT_ENABLE", "RATELIMIT_USE_CACHE", "SECRET_KEY", "DEBUG", "NO_SUCH_SETTING")

    def agree():
        for name in names:
            assert conf.setting(name, "?") == getattr(django_settings, name, "?"), name

    with (
        override_settings(**({"RATELIMIT_USE_CACHE": "default"} if layers >= 1 else {})),
        override_settings(**({"RATELIMIT_ENABLE": True} if layers >= 2 else {})),
    ):
        agree()
        django_settings.RATELIMIT_ENABLE = False
        agree()
        assert conf.enabled() is False
        del django_settings.RATELIMIT_ENABLE
        agree()
        assert conf.enabled() is True
        if layers:
            del django_settings.RATELIMIT_USE_CACHE  # hidden in this holder
            agree()


# --- metrics ---------------------------------------------------------------


def test_each_counted_call_is_one_decision_under_its_group():
    before = decisions("@rt-metrics")
    view = limited_view("rt-metrics", rate="3/m")
    assert [view(rf.get("/")) for _ in range(5)] == [False] * 3 + [True] * 2
    # Reads, disabled calls and calls of another method decide nothing.
    get_usage(rf.get("/"), group="rt-metrics", key="ip", rate="3/m")
    assert is_ratelimited(rf.get("/"), group="rt-metrics", key="ip", rate="3/m", method="POST",
                          increment=True) is False  # fmt: skip
    with override_settings(RATELIMIT_ENABLE=False):
        assert view(rf.get("/")) is False
    assert counted_since(before, "@rt-metrics") == {"allowed": 3, "denied": 2}


def test_the_default_group_and_a_django_cache_count_too(settings):
    settings.CACHES = {
        **settings.CACHES,
        "local": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "rt"},
    }
    settings.RATELIMIT_USE_CACHE = "local"

    def view(request):
        return "ok"

    name = policy_name(group_of(view))
    view = ratelimit(key="ip", rate="2/m")(view)
    before = decisions(name)
    results = []
    for _ in range(4):
        try:
            results.append(view(rf.get("/")))
        except Ratelimited:
            results.append(403)
    assert results == ["ok", "ok", 403, 403]
    assert counted_since(before, name) == {"allowed": 2, "denied": 2}


@pytest.mark.parametrize(("fail_open", "result"), [(False, "degraded_denied"),
                                                   (True, "degraded_allowed")])  # fmt: skip
def test_calls_redis_cannot_count_are_degraded_decisions(settings, private_redis, fail_open,
                                                         result):  # fmt: skip
    settings.RATELIMIT_FAIL_OPEN = fail_open
    view = limited_view("rt-degraded", rate="5/m")
    assert view(rf.get("/")) is False
    private_redis.stop()
    before = decisions("@rt-degraded")
    assert [view(rf.get("/")) for _ in range(3)] == [not fail_open] * 3
    assert counted_since(before, "@rt-degraded") == {result: 3}


def test_the_drf_drop_in_counts_each_decision(settings):
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "3/min"}}
    settings.DJANGO_RL = {}
    before = decisions("drf.anon")
    request = APIRequestFactory().get("/", REMOTE_ADDR="192.0.2.201")
    request.user = None
    answers = [AnonRateThrottle().allow_request(request, None) for _ in range(5)]
    assert answers == [True] * 3 + [False] * 2
    assert counted_since(before, "drf.anon") == {"allowed": 3, "denied": 2}


# --- the outage warning ----------------------------------------------------


def fail_open_warnings(caplog) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "django_rl"
        and r.levelno == logging.WARNING
        and "RATELIMIT_FAIL_OPEN" in r.getMessage()
    ]


def test_an_outage_warns_once_naming_ratelimit_fail_open(private_redis, caplog):
    caplog.set_level(logging.INFO, logger="django_rl")
    view = limited_view("rt-outage", rate="100/m")
    assert view(rf.get("/")) is False
    private_redis.stop()
    assert [view(rf.get("/")) for _ in range(4)] == [True] * 4  # the original's default
    (warning,) = fail_open_warnings(caplog)
    assert "RATELIMIT_FAIL_OPEN is False" in warning.getMessage()
    assert "RATELIMIT_FAIL_OPEN = True" in warning.getMessage()
    # Redis back: counted again, and the next outage warns again, once.
    private_redis.start(port=private_redis.port)
    deadline = time.monotonic() + 10
    while view(rf.get("/")) is not False:  # reconnected (a failure meanwhile: the same run)
        assert time.monotonic() < deadline
        time.sleep(0.1)
    private_redis.stop()
    assert [view(rf.get("/")) for _ in range(3)] == [True] * 3
    assert len(fail_open_warnings(caplog)) == 2


def test_an_outage_with_fail_open_says_calls_go_through(settings, private_redis, caplog):
    settings.RATELIMIT_FAIL_OPEN = True
    caplog.set_level(logging.INFO, logger="django_rl")
    view = limited_view("rt-outage-open")
    private_redis.stop()
    assert [view(rf.get("/")) for _ in range(3)] == [False] * 3
    (warning,) = fail_open_warnings(caplog)
    assert "RATELIMIT_FAIL_OPEN is True" in warning.getMessage()
