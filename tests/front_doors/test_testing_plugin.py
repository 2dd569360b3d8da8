"""The pytest plugin as a project meets it: a tiny project of its own, django_rl installed
into a fresh venv from the built wheel, its own pytest run with and without pytest-xdist.

The project's conftest imports nothing of django_rl: its fixtures come from the
``pytest11`` entry point ``django_rl``. Two tests on two xdist workers
exhaust the same policy for the same identity at the same time (a barrier of
files between them) and each sees exactly its own limit; ``--no-rate-limits``
turns every limit off for a run. Against the suite's own redis-server.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent

pytestmark = pytest.mark.slow

SETTINGS = """
import os
SECRET_KEY = "tiny"
DEBUG = True
USE_TZ = True
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_rl"]
MIDDLEWARE = []
ROOT_URLCONF = "tinyproj.urls"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                      "LOCATION": os.environ["TINY_REDIS_URL"]}}
DJANGO_RL = {"POLICIES": {"login": {"algorithm": "fixed_window", "rate": "3/m", "key": "ip"}}}
"""

URLS = """
from django.http import HttpResponse
from django.urls import path
from django_rl.decorators import ratelimit


@ratelimit("login")
def login(request):
    return HttpResponse("ok")


urlpatterns = [path("login/", login)]
"""

PYTEST_INI = """
[pytest]
DJANGO_SETTINGS_MODULE = tinyproj.settings
pythonpath = .
addopts = -p no:cacheprovider
"""

# Nothing of django_rl here: the fixtures come from the plugin.
CONFTEST = """
import pytest


@pytest.fixture
def no_limits_run(request):
    return request.config.getoption("--no-rate-limits")
"""

TESTS = '''
import os
import time
from pathlib import Path

import pytest
import redis
from django.test import SimpleTestCase

from django_rl import get_policy
from django_rl.testing import (
    assert_not_rate_limited, assert_rate_limited, exhaust, override_policy, rate_limits_disabled,
)

MARKS = Path(os.environ["TINY_MARKS"])
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")


def barrier(name):
    """With TINY_BARRIER (--dist each): wait (at most 30 s) until both workers are here."""
    (MARKS / f"here-{name}-{WORKER}").touch()
    if not os.environ.get("TINY_BARRIER"):
        return
    deadline = time.monotonic() + 30
    while len(list(MARKS.glob(f"here-{name}-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)


def exactly_its_own_limit(client, name):
    barrier(name)
    answers = [client.get("/login/", REMOTE_ADDR="203.0.113.5") for _ in range(5)]
    for answer in answers[:3]:
        assert_not_rate_limited(answer)
    for answer in answers[3:]:
        assert_rate_limited(answer)
    prefix = "rl" if WORKER == "main" else f"rl:{WORKER}"
    keys = redis.Redis.from_url(os.environ["TINY_REDIS_URL"]).keys(f"{prefix}:login:*")
    assert len(keys) == 1, keys
    (MARKS / f"done-{name}-{WORKER}").touch()


def test_exhaust_a(client, rate_limits_reset, no_limits_run):
    if no_limits_run:
        pytest.skip("limits off for the run")
    exactly_its_own_limit(client, "a")


def test_exhaust_b(client, rate_limits_reset, no_limits_run):
    if no_limits_run:
        pytest.skip("limits off for the run")
    exactly_its_own_limit(client, "b")


def test_the_disabled_fixture(client, rate_limits_reset, rate_limits_disabled):
    for _ in range(6):
        assert_not_rate_limited(client.get("/login/", REMOTE_ADDR="203.0.113.6"))


def test_no_rate_limits_option(client, rate_limits_reset, no_limits_run):
    answers = [client.get("/login/", REMOTE_ADDR="203.0.113.7") for _ in range(5)]
    expected = [200] * 5 if no_limits_run else [200, 200, 200, 429, 429]
    assert [a.status_code for a in answers] == expected


def test_helpers(client, rate_limits_reset, no_limits_run):
    if no_limits_run:
        pytest.skip("limits off for the run")
    exhaust("login", "ip:203.0.113.8")
    wait = assert_rate_limited(client.get("/login/", REMOTE_ADDR="203.0.113.8"))
    assert 0 < wait <= 60
    with override_policy("login", rate="1/m"):
        assert get_policy("login").limit == 1
        assert_not_rate_limited(client.get("/login/", REMOTE_ADDR="203.0.113.8"))
        assert_rate_limited(client.get("/login/", REMOTE_ADDR="203.0.113.8"))
    with rate_limits_disabled():
        assert_not_rate_limited(client.get("/login/", REMOTE_ADDR="203.0.113.8"))


@rate_limits_disabled
class DisabledCase(SimpleTestCase):
    def test_off(self):
        for _ in range(5):
            assert_not_rate_limited(self.client.get("/login/", REMOTE_ADDR="203.0.113.9"))


@override_policy("login", rate="1/m")
class OverriddenCase(SimpleTestCase):
    def test_one(self):
        if os.environ.get("TINY_NO_LIMITS"):
            self.skipTest("limits off for the run")
        assert_not_rate_limited(self.client.get("/login/", REMOTE_ADDR="203.0.113.10"))
        assert_rate_limited(self.client.get("/login/", REMOTE_ADDR="203.0.113.10"))
'''


#: What the project installs besides django_rl.
TOOLS = ("pytest", "pytest-django", "pytest-xdist")


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory: Any) -> Path:
    """A fresh venv with django_rl installed from its wheel, and pytest, pytest-django, xdist."""
    source = tmp_path_factory.mktemp("source")
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    dist = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = dist.glob("*.whl")
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(wheel), *TOOLS],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    return python


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "tiny"
    (root / "tinyproj").mkdir(parents=True)
    (root / "tinyproj" / "__init__.py").write_text("")
    (root / "tinyproj" / "settings.py").write_text(SETTINGS)
    (root / "tinyproj" / "urls.py").write_text(URLS)
    (root / "tests").mkdir()
    (root / "tests" / "conftest.py").write_text(CONFTEST)
    (root / "tests" / "test_limits.py").write_text(TESTS)
    (root / "pytest.ini").write_text(PYTEST_INI)
    (root / "marks").mkdir()
    return root


def run(
    python: Path, project: Path, url: str, *args: str, barrier: bool = False
) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ["PATH"],
        "TINY_REDIS_URL": url,
        "TINY_MARKS": str(project / "marks"),
    }
    if "--no-rate-limits" in args:
        env["TINY_NO_LIMITS"] = "1"
    if barrier:
        env["TINY_BARRIER"] = "1"
    return subprocess.run(
        [str(python), "-m", "pytest", "-q", "-rs", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def marks(project: Path) -> list[str]:
    return sorted(p.name for p in (project / "marks").iterdir())


def test_without_xdist(venv_python: Path, project: Path, redis_server: Any) -> None:
    result = run(venv_python, project, redis_server.url)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "7 passed" in result.stdout
    assert marks(project) == ["done-a-main", "done-b-main", "here-a-main", "here-b-main"]


def test_two_xdist_workers_each_see_exactly_their_own_limit(
    venv_python: Path, project: Path, redis_server: Any
) -> None:
    """``--dist each``: both workers run every test, the exhausting ones at the same time."""
    result = run(venv_python, project, redis_server.url, "-n", "2", "--dist", "each", barrier=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "14 passed" in result.stdout
    assert marks(project) == [
        f"{what}-{name}-{worker}"
        for what in ("done", "here")
        for name in "ab"
        for worker in ("gw0", "gw1")
    ]
    # The usual scheduling too (tests shared out between the workers).
    shared = run(venv_python, project, redis_server.url, "-n", "2")
    assert shared.returncode == 0, shared.stdout[-4000:] + shared.stderr[-2000:]
    assert "7 passed" in shared.stdout


def test_no_rate_limits_for_a_run(venv_python: Path, project: Path, redis_server: Any) -> None:
    client = redis_server.client()
    before = client.info("commandstats")
    result = run(venv_python, project, redis_server.url, "--no-rate-limits", "-k", "option")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout
    after = client.info("commandstats")
    # The fixture's resets only (SCAN, DEL, SET of the reset token): no decision.
    counted = {
        name: after[name]["calls"] - before.get(name, {"calls": 0})["calls"] for name in after
    }
    assert {name: n for name, n in counted.items() if n and name != "cmdstat_info"}.keys() <= {
        "cmdstat_scan",
        "cmdstat_del",
        "cmdstat_set",
        "cmdstat_hello",
        "cmdstat_client|setinfo",
        "cmdstat_select",
        "cmdstat_ping",
        "cmdstat_info",
    }
    for xdist in ([], ["-n", "2"]):
        full = run(venv_python, project, redis_server.url, "--no-rate-limits", *xdist)
        assert full.returncode == 0, full.stdout[-4000:] + full.stderr[-2000:]
        assert "3 passed, 4 skipped" in full.stdout
