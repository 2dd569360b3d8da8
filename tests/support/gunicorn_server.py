"""gunicorn serving ``tests/sites/settings_gunicorn.py`` with several workers, for the fault suite.

Started with the interpreter of the test run on a free port of 127.0.0.1,
stopped by pid: the master with SIGTERM (it stops its workers), then any
worker still there with SIGKILL, by the pid and start time noted when it was
seen, so that a pid reused meanwhile is never hit.
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.support import servers
from tests.support.redis_server import free_port, reap, spawn

#: The site's policy: its own limit per client and hour, counted in Redis.
LIMIT = 6
#: What each process admits per client and hour while Redis cannot answer.
#: The docs' recipe for 3 workers: the policy's limit divided by the worker
#: count, so the site-wide bound (fallback x processes) is the policy's limit.
FALLBACK = 2


def _stat(pid: int) -> tuple[int, int] | None:
    """Return ``(parent pid, start time)`` of ``pid`` from /proc, or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces: split after its ')'.
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[1]), int(fields[19])


def _children_of(parent: int) -> list[int]:
    """Return the pids whose parent is ``parent``."""
    return [
        int(entry)
        for entry in os.listdir("/proc")
        if entry.isdigit() and (_stat(int(entry)) or (0, 0))[0] == parent
    ]


class Gunicorn:
    """gunicorn with ``workers`` sync workers, serving the site against ``redis_url``.

    Sync workers serve one request at a time each: with more concurrent
    clients than workers every worker takes requests, so every process of
    the site meets an outage.

    :param redis_url: what the site's ``CACHES`` point at.
    :param timeout: the socket timeouts of that connection, in seconds.
    """

    def __init__(self, redis_url: str, timeout: float, workers: int = 3) -> None:
        self.workers = workers
        self.directory = tempfile.mkdtemp(prefix="django-rl-gunicorn-")
        self.log = os.path.join(self.directory, "django_rl.log")
        self.env = {
            "DJANGO_SETTINGS_MODULE": "tests.sites.settings_gunicorn",
            "DJANGO_RL_TEST_REDIS": redis_url,
            "DJANGO_RL_TEST_TIMEOUT": str(timeout),
            "DJANGO_RL_TEST_LOG": self.log,
        }
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        #: pid -> start time of each worker seen.
        self.seen: dict[int, int] = {}

    def start(self, timeout: float = 60) -> None:
        """Start gunicorn and return once every worker has answered a request.

        A free port can be taken before gunicorn binds it: then gunicorn
        exits, and another port is tried (3 in all).
        """
        for _attempt in range(3):
            if self._start(timeout):
                return
        raise RuntimeError(f"gunicorn did not start; see {self.directory}/error.log")

    def _start(self, timeout: float) -> bool:
        self.port = free_port()
        self.process = spawn(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "--workers",
                str(self.workers),
                "--worker-class",
                "sync",
                "--bind",
                f"127.0.0.1:{self.port}",
                "--chdir",
                str(servers.ROOT),
                # A worker serving a request stuck on a paused Redis waits
                # one socket timeout at most: a short grace is plenty.
                "--graceful-timeout",
                "3",
                "--log-level",
                "warning",
                "--error-logfile",
                os.path.join(self.directory, "error.log"),
                "django.core.wsgi:get_wsgi_application()",
            ],
            self.env,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            if len(self.ready_workers()) == self.workers:
                stats = {pid: _stat(pid) for pid in self.worker_pids()}
                self.seen = {pid: stat[1] for pid, stat in stats.items() if stat is not None}
                return True
            time.sleep(0.1)
        self.stop()
        return False

    def ready_workers(self) -> set[int]:
        """Return the pids that answered one of ``2 x workers`` concurrent calls of ``/ready/``.

        ``/ready/`` holds its worker 0.2 s, so concurrent calls spread over
        every worker that has loaded the site.
        """

        def call(_: int) -> int | None:
            try:
                status, headers = self.get("/ready/", timeout=5)
            except OSError:
                return None
            return int(headers["X-Worker"]) if status == 200 else None

        with ThreadPoolExecutor(2 * self.workers) as pool:
            pids = set(pool.map(call, range(2 * self.workers)))
        return {pid for pid in pids if pid is not None}

    def get(
        self, path: str, headers: dict[str, str] | None = None, timeout: float = 10
    ) -> tuple[int, dict[str, str]]:
        """Send one GET on a connection of its own; return the status and the headers."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            connection.request("GET", path, headers=headers or {})
            response = connection.getresponse()
            response.read()
            return response.status, dict(response.getheaders())
        finally:
            connection.close()

    def worker_pids(self) -> list[int]:
        """Return the pids of the master's children (its workers) now."""
        assert self.process is not None
        return _children_of(self.process.pid)

    def stop(self) -> None:
        """Stop the master and its workers, whatever state they are in; wait for them."""
        process, self.process = self.process, None
        if process is not None:
            for pid in _children_of(process.pid):
                self.seen.setdefault(pid, (_stat(pid) or (0, 0))[1])
            reap(process, timeout=10)  # SIGTERM; SIGKILL after 10 s
        # A worker the master could not stop (or orphaned by its SIGKILL).
        for pid, started in self.seen.items():
            if (_stat(pid) or (0, -1))[1] == started:
                os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        """Stop, then delete the directory of the logs."""
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
