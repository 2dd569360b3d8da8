"""``make demo`` serves the example site, answers 429 when a limit is reached, and stops cleanly."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis as redis_py

from django_rl.observability import history
from tests.redis_server import free_port

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def status(url: str, method: str = "GET") -> int:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def wait_for(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if status(url) == 200:
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer within {timeout} s")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def redis_of(log: Path) -> redis_py.Redis:
    """Return a client of the private Redis the demo says it started."""
    found = re.search(r"Started a private redis-server at (\S+) ", log.read_text())
    assert found is not None, log.read_text()
    return redis_py.Redis.from_url(found[1])


def history_totals(
    client: redis_py.Redis, policy: str, expected: list[int], within: float
) -> list[int]:
    """Return [allowed, denied, shadow-denied] of ``policy``'s history once ``expected``.

    Or what it is after ``within`` seconds: a flush may land between two requests.
    """
    deadline = time.monotonic() + within
    while True:
        keys = [k for k in client.keys(f"rl-example:~history:{{{policy}}}:*") if b":top:" not in k]
        totals = [sum(int(client.hget(key, field) or 0) for key in keys) for field in "ads"]
        if totals == expected or time.monotonic() > deadline:
            return totals
        time.sleep(0.1)


def test_make_demo_serves_the_site_and_stops_cleanly(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env.update(DEMO_PORT=str(port), EXAMPLE_DB=str(tmp_path / "demo.sqlite3"))
    log = tmp_path / "demo.log"
    with log.open("wb") as out:
        demo = subprocess.Popen(
            ["make", "--no-print-directory", "demo"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(f"{base}/", timeout=90)
        assert status(f"{base}/admin/login/") == 200
        codes = [status(f"{base}/login/", method="POST") for _ in range(6)]
        assert codes == [401] * 5 + [429]
        # search is in shadow mode: 12 requests, 12 answers 200, 2 would-be denials.
        assert [status(f"{base}/search/") for _ in range(12)] == [200] * 12
        with urllib.request.urlopen(f"{base}/metrics/", timeout=5) as response:
            metrics = response.read().decode()
        assert 'django_rl_decisions_total{policy="search",result="shadow_denied"} 2.0' in metrics
        # The charts fill: the server's history thread writes within its interval.
        redis = redis_of(log)
        try:
            within = history.FLUSH_INTERVAL + 3  # one interval, and a margin for a busy machine
            assert history_totals(redis, "search", [10, 0, 2], within) == [10, 0, 2]
            assert history_totals(redis, "login", [5, 1, 0], within) == [5, 1, 0]
        finally:
            redis.close()
    finally:
        os.killpg(demo.pid, signal.SIGTERM)
        demo.wait(30)
    output = log.read_text()
    assert "Demo superuser: admin / demo-password" in output
    started = re.search(r"Started a private redis-server at \S+ \(pid (\d+)\)", output)
    assert started is not None, output
    assert f"Stopped the private redis-server (pid {started[1]})." in output
    assert not pid_alive(int(started[1]))
    with pytest.raises(OSError):
        status(f"{base}/")
