"""``make demo``: the example site with a Redis, a database and a superuser, ready to try.

Uses ``REDIS_URL`` when it is set; otherwise starts a private redis-server on
a free port (never touching a Redis it did not start) and stops it on exit.
Migrates the example's SQLite database, creates a demo superuser, prints the
URLs and serves the site on 127.0.0.1:``DEMO_PORT`` (8000) until Ctrl-C or
SIGTERM, then stops everything it started.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.redis_server import RedisServer  # noqa: E402 - needs ROOT on sys.path

USERNAME = "admin"
PASSWORD = "demo-password"


def start_redis() -> RedisServer:
    """Start a private redis-server on a free port (the test suite's helper)."""
    if shutil.which("redis-server") is None:
        sys.exit(
            "redis-server is not installed and could not be installed here: "
            "run `sudo apt-get install redis-server`, or set REDIS_URL to a Redis you have."
        )
    server = RedisServer()
    server.start()
    return server


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True)


def main() -> None:
    port = int(os.environ.get("DEMO_PORT", "8000"))
    redis = None
    url = os.environ.get("REDIS_URL")
    if url:
        print(f"Using REDIS_URL={url}")
    else:
        redis = start_redis()
        url = redis.url
        assert redis.process is not None
        print(f"Started a private redis-server at {url} (pid {redis.process.pid})")
    env = {**os.environ, "REDIS_URL": url, "DJANGO_SETTINGS_MODULE": "example_project.settings"}
    server = None
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        if server is not None and server.poll() is None:
            server.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        manage(env, "migrate", "--noinput", "--verbosity", "0")
        create = (
            "from django.contrib.auth import get_user_model\n"
            "User = get_user_model()\n"
            f"user = User.objects.filter(username={USERNAME!r}).first()\n"
            f"user = user or User(username={USERNAME!r})\n"
            "user.is_staff = user.is_superuser = True\n"
            f"user.set_password({PASSWORD!r})\n"
            "user.save()\n"
        )
        subprocess.run(
            [sys.executable, "-c", "import django; django.setup()\n" + create],
            cwd=ROOT,
            env=env,
            check=True,
        )
        base = f"http://127.0.0.1:{port}"
        print(
            f"\nDemo superuser: {USERNAME} / {PASSWORD}\n\n"
            f"  {base}/                                  fire requests at each policy\n"
            f"  {base}/admin/django_rl/livecounter/      live counters and charts (log in first)\n"
            f"  {base}/metrics/                          Prometheus metrics\n"
            f"  {base}/api/items/                        DRF browsable API (throttled)\n"
            f"  curl -i -X POST {base}/login/            5 a minute, then 429 with Retry-After\n"
            "\nCtrl-C stops the site and everything the demo started.\n",
            flush=True,
        )
        if not stopping:
            server = subprocess.Popen(
                [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
                cwd=ROOT,
                env=env,
            )
            server.wait()
    finally:
        if server is not None and server.poll() is None:
            server.terminate()
            server.wait(10)
        if redis is not None:
            pid = redis.process.pid if redis.process is not None else None
            redis.close()  # stops it by pid and removes its directory
            print(f"Stopped the private redis-server (pid {pid}).")


if __name__ == "__main__":
    main()
