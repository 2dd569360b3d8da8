"""``make demo``: the example site with a Redis, a database and a superuser, ready to try.

Uses ``REDIS_URL`` when it is set; otherwise starts a private redis-server on
a free port (never touching a Redis it did not start) and stops it on exit.
Migrates the example's SQLite database, creates a demo superuser, prints the
URLs and how to run ``manage.py`` against the demo's Redis, and serves the
site on 127.0.0.1:``DEMO_PORT`` (8000) until Ctrl-C or SIGTERM, then stops
everything it started.

Exits non-zero, saying which port and how to choose another, when the port is
taken (before it starts anything), and with the site's status when the site
fails to start or stops by itself.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.redis_server import RedisServer  # noqa: E402 - needs ROOT on sys.path

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


#: Where the site listens; ``DEMO_PORT`` picks the port.
HOST = "127.0.0.1"
DEFAULT_PORT = 8000


def demo_port() -> int:
    """Return ``DEMO_PORT`` (8000 if unset); exit with a message if it is not a port number."""
    text = os.environ.get("DEMO_PORT", "") or str(DEFAULT_PORT)
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        sys.exit(f"DEMO_PORT={text!r} is not a port number: give one from 1 to 65535.")
    return int(text)


def port_busy(port: int) -> OSError | None:
    """Return why ``HOST:port`` cannot be listened on (another server has it), or ``None``.

    Bound as ``runserver`` binds (``SO_REUSEADDR``): a port left in TIME_WAIT
    by the last demo is free to it, one another socket holds is not.
    """
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError as exc:
            return exc
    return None


def busy_message(port: int, why: object) -> str:
    """Say which port is taken and how to choose another."""
    return (
        f"Port {port} on {HOST} is busy ({why}): another server listens there. "
        f"Stop it, or choose another port with DEMO_PORT, e.g. `make demo DEMO_PORT={port + 1}`."
    )


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True)


def main() -> int:
    """Run the demo; return the exit status (0 when stopped by Ctrl-C or SIGTERM)."""
    port = demo_port()
    busy = port_busy(port)
    if busy is not None:
        print(busy_message(port, busy.strerror or busy), file=sys.stderr)
        return 1
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
    status = 0

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
        base = f"http://{HOST}:{port}"
        print(
            f"\nDemo superuser: {USERNAME} / {PASSWORD}\n\n"
            f"  {base}/                                  fire requests at each policy\n"
            f"  {base}/admin/django_rl/livecounter/      live counters and charts (log in first)\n"
            f"  {base}/metrics/                          Prometheus metrics\n"
            f"  {base}/api/items/                        DRF browsable API (throttled)\n"
            f"  {base}/rate_limit/                       your standing on every policy (JSON)\n"
            f"  {base}/api/schema/                       OpenAPI schema, 429s documented\n"
            f"  curl -i -X POST {base}/login/            5 a minute, then 429 with Retry-After\n"
            f"\n{manage_hint(env)}\n"
            "\nCtrl-C stops the site and everything the demo started.\n",
            flush=True,
        )
        if not stopping:
            server = subprocess.Popen(
                [sys.executable, "manage.py", "runserver", f"{HOST}:{port}", "--noreload"],
                cwd=ROOT,
                env=env,
            )
            code = server.wait()
            if not stopping and code != 0:
                # The site did not start (the port was taken in the meantime) or failed.
                busy = port_busy(port)
                if busy is not None:
                    print(busy_message(port, busy.strerror or busy), file=sys.stderr)
                status = code if code > 0 else 1
    finally:
        if server is not None and server.poll() is None:
            server.terminate()
            server.wait(10)
        if redis is not None:
            pid = redis.process.pid if redis.process is not None else None
            redis.close()  # stops it by pid and removes its directory
            print(f"Stopped the private redis-server (pid {pid}).")
    return status


def manage_hint(env: dict[str, str]) -> str:
    """Say how to run ``manage.py`` commands against this demo's Redis and database."""
    python = Path(sys.executable)
    try:
        shown = python.relative_to(ROOT)  # .venv-demo/bin/python, as make demo runs it
    except ValueError:
        shown = python
    variables = f"REDIS_URL={shlex.quote(env['REDIS_URL'])}"
    if "EXAMPLE_DB" in env:
        variables += f" EXAMPLE_DB={shlex.quote(env['EXAMPLE_DB'])}"
    return (
        "manage.py commands against this demo's Redis (in another terminal):\n"
        f"  cd {shlex.quote(str(ROOT))} && {variables} {shlex.quote(str(shown))} manage.py "
        "ratelimit policies\n"
        "  (or: ratelimit top login, ratelimit inspect login ip:127.0.0.1, "
        "ratelimit reset login ip:127.0.0.1, ratelimit demo, check)"
    )


if __name__ == "__main__":
    sys.exit(main())
