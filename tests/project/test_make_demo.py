"""``make demo`` serves the example site, answers 429 when a limit is reached, and stops cleanly."""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis as redis_py

from django_rl.observability import history
from tests.conftest import start_of_fresh_window
from tests.support.redis_server import free_port

ROOT = Path(__file__).resolve().parent.parent.parent

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


def manage_command(banner: str) -> str:
    """Return the command line the banner gives for manage.py against the demo's Redis."""
    found = re.search(r"manage.py commands against this demo's Redis.*:\n  (.*)\n", banner)
    assert found is not None, banner
    return found[1]


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


def demo_env(**more: str) -> dict[str, str]:
    """Return this environment without REDIS_URL (the demo starts its own Redis), plus ``more``."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DEMO_PORT")}
    env.update(more)
    return env


@pytest.fixture(scope="module")
def demo_venv() -> Path:
    """Make the demo's own virtualenv first: the site's wait below is not for pip."""
    done = subprocess.run(
        ["make", "--no-print-directory", "demo-venv"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return ROOT / ".venv-demo"


def test_the_demo_installs_only_what_the_site_needs(demo_venv):
    listed = subprocess.run(
        [str(demo_venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    installed = {line.split("==")[0].lower().replace("_", "-") for line in listed.split()}
    assert {"django", "django-redis", "redis", "djangorestframework", "prometheus-client"} <= (
        installed
    )
    # Nothing of the test or lint toolchains (the project's .venv has them).
    assert not installed & {"pytest", "ruff", "mypy", "playwright", "tox", "hypothesis"}


def test_a_busy_port_is_named_and_the_demo_fails(demo_venv, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = demo_env(DEMO_PORT=str(port), EXAMPLE_DB=str(tmp_path / "demo.sqlite3"))
        done = subprocess.run(
            ["make", "--no-print-directory", "demo"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert (
        f"Port {port} on 127.0.0.1 is busy (Address already in use): another server listens "
        f"there. Stop it, or choose another port with DEMO_PORT, e.g. "
        f"`make demo DEMO_PORT={port + 1}`." in done.stderr
    ), output
    # It stops before starting anything: no banner, no Redis.
    assert "Demo superuser" not in output
    assert "redis-server" not in output


def test_a_bound_port_that_does_not_listen_is_busy_too(demo_venv, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        done = subprocess.run(
            ["make", "--no-print-directory", "demo", f"DEMO_PORT={port}"],
            cwd=ROOT,
            env=demo_env(EXAMPLE_DB=str(tmp_path / "demo.sqlite3")),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode != 0
    assert f"Port {port} on 127.0.0.1 is busy" in done.stderr, done.stdout + done.stderr
    assert "DEMO_PORT" in done.stderr


def test_make_demo_serves_the_site_and_stops_cleanly(demo_venv, tmp_path):
    port = free_port()
    env = demo_env(DEMO_PORT=str(port), EXAMPLE_DB=str(tmp_path / "demo.sqlite3"))
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
        redis = redis_of(log)
        try:
            # search counts in fixed windows of a minute: its 12 requests
            # (with login's 6, well under a second) start with 15 s left in
            # one, on the demo's Redis clock (the site's too: the same host),
            # so its 2 would-be denials do not depend on the moment the test
            # runs. (login's sliding log has no window edges.)
            start_of_fresh_window(redis, 60_000, min_left_ms=15_000)
            codes = [status(f"{base}/login/", method="POST") for _ in range(6)]
            assert codes == [401] * 5 + [429]
            # search is in shadow mode: 12 requests, 12 answers 200, 2 would-be denials.
            assert [status(f"{base}/search/") for _ in range(12)] == [200] * 12
            with urllib.request.urlopen(f"{base}/metrics/", timeout=5) as response:
                metrics = response.read().decode()
            search = 'django_rl_decisions_total{policy="search",result="shadow_denied"} 2.0'
            assert search in metrics
            # The banner's manage.py command runs against the demo's Redis and sees the 429.
            command = manage_command(log.read_text())
            assert command.startswith(f"cd {shlex.quote(str(ROOT))} && REDIS_URL=redis://")
            assert " .venv-demo/bin/python manage.py ratelimit policies" in command
            top = subprocess.run(
                command.replace("ratelimit policies", "ratelimit top login"),
                shell=True,
                env={k: v for k, v in env.items() if k != "DJANGO_SETTINGS_MODULE"},
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert top.returncode == 0, top.stderr
            assert re.search(r"^ip:127\.0\.0\.1 +5 / 5 +0 +denied", top.stdout, re.MULTILINE), (
                top.stdout
            )
            # The charts fill: the server's history thread writes within its interval.
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
