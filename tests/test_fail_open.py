"""Redis down: decisions follow FAIL_OPEN, never raise; one warning per outage."""

from __future__ import annotations

import logging
import re

import pytest
from django.test import Client, override_settings

from django_rl import get_policy
from tests.redis_server import RedisServer, caches_for, free_port


@pytest.fixture
def dead_port():
    return free_port()


def test_fail_open_allows_and_says_degraded(settings, dead_port):
    with override_settings(CACHES=caches_for(f"redis://127.0.0.1:{dead_port}/0")):
        decision = get_policy("login").hit("ip:1")
    assert (decision.allowed, decision.degraded, decision.remaining) == (True, True, 5)


def test_fail_closed_denies_with_a_short_retry_after(settings, dead_port):
    settings.DJANGO_RL = {**settings.DJANGO_RL, "FAIL_OPEN": False}
    with override_settings(CACHES=caches_for(f"redis://127.0.0.1:{dead_port}/0")):
        decision = get_policy("login").hit("ip:1")
        response = Client().get("/limited/")
        api = Client().get("/api/scoped/")
    assert (decision.allowed, decision.degraded, decision.retry_after) == (False, True, 1.0)
    assert (response.status_code, response["Retry-After"]) == (429, "1")
    assert (api.status_code, api["Retry-After"]) == (429, "1")


def test_one_warning_per_outage_and_one_line_when_back(settings, dead_port, caplog):
    caplog.set_level(logging.INFO, logger="django_rl")
    with override_settings(CACHES=caches_for(f"redis://127.0.0.1:{dead_port}/0")):
        policy = get_policy("login")
        assert all(policy.hit("ip:1").degraded for _ in range(5))
        (record,) = caplog.records
        assert record.levelname == "WARNING"
        assert re.fullmatch(
            r"Redis for rate limiting \(CACHES\['default'\]\) is unavailable "
            r"\(ConnectionError: .*refused.*\); "
            r"decisions follow FAIL_OPEN until it answers again\.",
            record.getMessage(),
        )
        server = RedisServer()
        server.start(port=dead_port)
        try:
            caplog.clear()
            decisions = [policy.hit("ip:1") for _ in range(3)]
        finally:
            server.close()
    assert [(d.allowed, d.degraded, d.remaining) for d in decisions] == [
        (True, False, 4),
        (True, False, 3),
        (True, False, 2),
    ]
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "Redis for rate limiting (CACHES['default']) is back.")
    ]
