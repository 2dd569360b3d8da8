"""``manage.py ratelimit demo`` replays the lesson with the lesson's counts, and cleans up."""

from __future__ import annotations

import io
import os
import re
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parent.parent.parent

pytestmark = pytest.mark.slow

EXPECTED = [
    r"Replaying the lesson with django_rl \(scratch key prefix 'rl-demo-[0-9a-f]{8}'\):",
    r"naive after crash: ttl = -1 \| allowed: true true true true false false false false",
    r"EXPIRE NX on a key without TTL -> 1 , again -> 0",
    r"429 Too Many Requests",
    r"Retry-After: (?P<retry_after>\d+) \| remaining 0",
    r"fixed window: allowed in 200 ms around the edge: 10 of 10 \(limit is 5 per second\)",
    r"sliding log : allowed in 200 ms around the edge: 5 of 10",
    r"token bucket: 5 quick calls then one after 1\.1 s -> 1 1 1 0 0 1",
    r"",
    r"Deleted the demo's \d+ keys\.",
]


def test_demo_prints_the_lessons_results_and_leaves_no_key(redis_client):
    out = io.StringIO()
    call_command("ratelimit", "demo", stdout=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == len(EXPECTED), lines
    for line, pattern in zip(lines, EXPECTED, strict=True):
        assert re.fullmatch(pattern, line), (line, pattern)
    retry_after = re.fullmatch(EXPECTED[4], lines[4])
    assert retry_after is not None and 1 <= int(retry_after["retry_after"]) <= 60
    assert list(redis_client.scan_iter(match="rl-demo-*")) == []


def test_demo_runs_in_the_demos_own_virtualenv_against_its_redis(redis_client, redis_server):
    # As the README and make demo's banner say: the demo's small virtualenv and
    # REDIS_URL suffice for manage.py's commands (nothing of the test toolchain).
    made = subprocess.run(
        ["make", "--no-print-directory", "demo-venv"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["REDIS_URL"] = redis_server.url
    done = subprocess.run(
        [".venv-demo/bin/python", "manage.py", "ratelimit", "demo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    # The example project's KEY_PREFIX is rl-example: the scratch prefix follows it.
    expected = [EXPECTED[0].replace("'rl-demo-", "'rl-example-demo-"), *EXPECTED[1:]]
    lines = done.stdout.splitlines()
    assert len(lines) == len(expected), lines
    for line, pattern in zip(lines, expected, strict=True):
        assert re.fullmatch(pattern, line), (line, pattern)
    assert list(redis_client.scan_iter(match="rl-example-demo-*")) == []
