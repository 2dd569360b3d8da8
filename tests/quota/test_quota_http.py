"""A quota policy behind the front doors: the decorator (sync and async views), DRF's
``PolicyThrottle``; the 429's Retry-After runs to the period's end, and the headers'
``w`` is the period's length, under the app's clock moved across a 25-hour day."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import time_machine
from django.test import Client

ZONE = ZoneInfo("Europe/London")
#: 2026-10-25 is 25 hours long in London (clocks go back at 02:00).
NOW = dt.datetime(2026, 10, 25, 20, 0, tzinfo=ZONE)
END = dt.datetime(2026, 10, 26, tzinfo=ZONE)


@pytest.fixture(autouse=True)
def _quota(settings: Any) -> None:
    settings.ROOT_URLCONF = "tests.sites.urls"
    spec = {"algorithm": "quota", "limit": 2, "period": "day", "timezone": "Europe/London"}
    settings.DJANGO_RL = {"CLOCK": "app", "POLICIES": {"per_minute": {**spec, "key": "ip"}}}


@pytest.mark.parametrize("url", ["/limited/", "/limited-async/", "/api/scoped/"])
def test_the_429_waits_for_the_periods_end_and_the_window_is_25_hours(url: str) -> None:
    client = Client(REMOTE_ADDR="192.0.2.50")
    with time_machine.travel(NOW, tick=False) as traveller:
        statuses = [client.get(url).status_code for _ in range(3)]
        assert statuses == [200, 200, 429]
        denied = client.get(url)
        left = END.timestamp() - NOW.timestamp()
        assert int(denied["Retry-After"]) == math.ceil(left) == 4 * 3600
        assert "w=90000" in denied["RateLimit-Policy"]
        traveller.move_to(END)
        allowed = client.get(url)
        assert allowed.status_code == 200
        assert "w=86400" in allowed["RateLimit-Policy"]  # 26 October: 24 hours
