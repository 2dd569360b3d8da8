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
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
USERNAME = "admin"
PASSWORD = "demo-password"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_redis() -> tuple[subprocess.Popen[bytes], str, str]:
    """Start a private redis-server; return the process, its URL and its directory."""
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit(
            "redis-server is not installed and could not be installed here: "
            "run `sudo apt-get install redis-server`, or set REDIS_URL to a Redis you have."
        )
    directory = tempfile.mkdtemp(prefix="django-rl-demo-redis-")
    port = free_port()
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            directory,
            "--logfile",
            os.path.join(directory, "redis.log"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return process, f"redis://127.0.0.1:{port}/0", directory
        except OSError:
            time.sleep(0.05)
    process.kill()
    sys.exit(f"redis-server did not start; see {directory}/redis.log")


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True)


def main() -> None:
    port = int(os.environ.get("DEMO_PORT", "8000"))
    redis = None
    directory = None
    url = os.environ.get("REDIS_URL")
    if url:
        print(f"Using REDIS_URL={url}")
    else:
        redis, url, directory = start_redis()
        print(f"Started a private redis-server at {url} (pid {redis.pid})")
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
            f"  {base}/admin/django_rl/livecounter/      live counters (log in first)\n"
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
            redis.terminate()
            redis.wait(10)
            print(f"Stopped the private redis-server (pid {redis.pid}).")
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
