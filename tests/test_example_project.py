"""The example project is a working site: it passes its checks and limits requests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow

REQUESTS = """
import django
django.setup()
from django.test import Client
c = Client()
print([c.post('/login/').status_code for _ in range(6)])
print(c.get('/login/').status_code)
r = [c.get('/burst/') for _ in range(4)]
print([x.status_code for x in r], r[-1]['Retry-After'])
print([c.get('/api/items/').status_code for _ in range(2)])
print(c.get('/').status_code)
print(c.get('/api/items/')['RateLimit-Policy'], c.post('/login/')['RateLimit'])
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
    ]
    # The counters (not the reset token, rl-example:~epoch: reset_epoch.py).
    keys = [k for k in redis_server.client().keys("rl-example:*") if b":~" not in k]
    assert len(keys) == 3
