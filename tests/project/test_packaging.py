"""The built sdist and wheel are complete, and an installed wheel runs a site."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent

pytestmark = pytest.mark.slow


def package_files() -> set[str]:
    """Every file git tracks under django_rl/, as a path inside the package."""
    listed = subprocess.run(
        ["git", "ls-files", "django_rl"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return {name for name in listed if not name.endswith(".pyc")}


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    # Build from a copy of the tracked files: setuptools writes build/ and
    # *.egg-info into the tree it builds, and the tox matrix builds in
    # several environments at once.
    source = tmp_path_factory.mktemp("source")
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out


def test_wheel_and_sdist_hold_every_package_file(dist):
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    expected = package_files()
    assert {"django_rl/py.typed", "django_rl/algorithms/sliding_log.lua"} <= expected
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    assert expected - in_wheel == set()
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        in_sdist = {name.removeprefix(top + "/") for name in tar.getnames()}
    assert expected - in_sdist == set()
    assert {"README.md", "tests/conftest.py", "example_project/settings.py"} <= in_sdist


def test_the_metadata_names_the_projects_urls(dist):
    # A pip user has no docs/ folder: hints name URLs under the project's home.
    from email.parser import Parser

    from django_rl.docs_urls import HOME

    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(name).decode())
    urls = dict(value.split(", ", 1) for value in metadata.get_all("Project-URL"))
    assert {"Documentation", "Source", "Issues"} <= set(urls)
    assert all(url.startswith(HOME) for url in urls.values())
    assert metadata["Home-page"] == HOME


def test_twine_check_passes(dist):
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, dist.iterdir())],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


REQUEST = """
import django
django.setup()
import django_rl
assert "site-packages" in django_rl.__file__, django_rl.__file__
from django.test import Client
c = Client()
print([c.post('/login/').status_code for _ in range(6)])
"""


def test_installed_wheel_runs_the_example_project(dist, tmp_path, redis_server):
    (wheel,) = dist.glob("*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", f"{wheel}[drf]"],
        check=True,
        capture_output=True,
        timeout=300,
    )
    site = tmp_path / "site"
    shutil.copytree(ROOT / "example_project", site / "example_project")
    shutil.copy(ROOT / "manage.py", site / "manage.py")
    env = {
        "PATH": os.environ["PATH"],
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "REDIS_URL": redis_server.url,
        "EXAMPLE_DB": str(tmp_path / "db.sqlite3"),
    }
    check = subprocess.run(
        [str(python), "manage.py", "check"], cwd=site, env=env, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr
    hit = subprocess.run(
        [str(python), "-c", REQUEST], cwd=site, env=env, capture_output=True, text=True
    )
    assert hit.returncode == 0, hit.stderr
    assert hit.stdout.split() == ["[401,", "401,", "401,", "401,", "401,", "429]"]
