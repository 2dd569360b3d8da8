"""A private redis-server for the tests: started on a free port, stopped by pid.

The suite owns this server, so tests may flush, kill, pause and restart it.
It never touches any other Redis (such as a shared one on 6379).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import redis


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def caches_for(url: str, **options: object) -> dict[str, dict[str, object]]:
    """Return a CACHES setting whose default alias is a django-redis cache at ``url``."""
    return {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": url,
            "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 1, **options},
        }
    }


class RedisServer:
    """One redis-server process with no persistence, bound to 127.0.0.1."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server is not installed; `make test` installs it "
                "(or: sudo apt-get install redis-server)"
            )
        self.binary = binary
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.directory = tempfile.mkdtemp(prefix="django-rl-redis-")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5)

    def start(self, port: int | None = None) -> None:
        """Start the server (on ``port``, or a free one) and wait until it answers PING."""
        for _attempt in range(5):
            self.port = port or free_port()
            self.process = subprocess.Popen(
                [
                    self.binary,
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    self.directory,
                    "--logfile",
                    os.path.join(self.directory, "redis.log"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if self._wait_ready():
                return
            self.stop()  # the port was taken in between: try another
            if port:
                break
        raise RuntimeError(f"redis-server did not start; see {self.directory}/redis.log")

    def _wait_ready(self, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        client = redis.Redis(port=self.port, socket_timeout=1, socket_connect_timeout=1)
        try:
            while time.monotonic() < deadline:
                if self.process is None or self.process.poll() is not None:
                    return False
                try:
                    if client.ping():
                        return True
                except redis.ConnectionError:
                    time.sleep(0.02)
            return False
        finally:
            client.close()

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 5 s) and reap it."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def kill(self) -> None:
        """SIGKILL the server, as a crash would."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
            self.process = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
