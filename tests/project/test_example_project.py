"""The example project is a working site: it passes its checks and limits requests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent

pytestmark = pytest.mark.slow

#: Left in the minute when the script's requests start. ``api`` and
#: ``search`` count in fixed windows of a minute, and a window's key expires
#: at its end: the requests, and the count of the counters' keys, must fall
#: in one window. They take well under a second; the script waits, on the
#: Redis server's clock (the app's too: the same host), for a minute with at
#: least this much left.
MARGIN_MS = 15_000

REQUESTS = f"""
import os, time
import django
django.setup()
import redis
from django.test import Client
server = redis.Redis.from_url(os.environ["REDIS_URL"])
seconds, micros = server.time()
left = 60_000 - (seconds * 1000 + micros // 1000) % 60_000
if left < {MARGIN_MS}:
    time.sleep(left / 1000 + 0.05)
c = Client()
print([c.post('/login/').status_code for _ in range(6)])
print(c.get('/login/').status_code)
r = [c.get('/burst/') for _ in range(4)]
print([x.status_code for x in r], r[-1]['Retry-After'])
print([c.get('/api/items/').status_code for _ in range(2)])
print(c.get('/').status_code)
print(c.get('/api/items/')['RateLimit-Policy'], c.post('/login/')['RateLimit'])
r = [c.get('/search/') for _ in range(12)]
print([x.status_code for x in r], r[-1].json()['limited'], r[-1].has_header('RateLimit'))
metrics = c.get('/metrics/').content.decode().splitlines()
print([line for line in metrics if line.startswith('django_rl_decisions_total{{policy="search"')])
# The counters (not the app's own keys, rl-example:~...: the reset token, the
# history), counted in the requests' window.
print(len([key for key in server.keys("rl-example:*") if b":~" not in key]))
server.close()
"""


def run(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "REDIS_URL": redis_url,
        "PYTHONWARNINGS": "error",
    }
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_passes(redis_server):
    result = run(redis_server.url, "manage.py", "check", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_both_front_doors_limit(redis_server):
    result = run(redis_server.url, "-c", REQUESTS)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "[401, 401, 401, 401, 401, 429]",
        "200",
        "[200, 200, 200, 429] 1",
        "[200, 200]",
        "200",
        '"api";q=20;w=60 "login";r=0;t=60',
        # search is in shadow mode: never denied, no headers, its would-be
        # denials counted.
        f"{[200] * 12} False False",
        '[\'django_rl_decisions_total{policy="search",result="allowed"} 10.0\', '
        '\'django_rl_decisions_total{policy="search",result="shadow_denied"} 2.0\']',
        "4",  # the counters: login, burst, api and search
    ]
    client = redis_server.client()
    # The process wrote its history as it exited (the charts' data).
    listed = client.zrange("rl-example:~history:policies", 0, -1)
    assert sorted(listed) == [b"api", b"burst", b"login", b"search"]
    search = [k for k in client.keys("rl-example:~history:{search}:*") if b":top:" not in k]
    totals = [sum(int(client.hget(key, field) or 0) for key in search) for field in "ads"]
    assert totals == [10, 0, 2]
