"""Celery workers the tests start: ``celery worker`` processes of ``tests/tasks/celery_app.py``.

Each worker is started in a session of its own, so that stopping it (a warm
shutdown by SIGTERM, then SIGKILL to the whole group after a grace period)
also ends its pool's processes; whatever is left when the test process
exits is killed by the same group. The broker is a redis-server of its own
(the suite's server is flushed before every test, broker queues and all);
the policies count on the suite's server.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from celery import Celery

from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent.parent
_groups: set[int] = set()


def client_app(broker: RedisServer) -> Celery:
    """The test process's app: publishes by task name, reads results; defines no task."""
    app = Celery("django_rl_tests_client", set_as_current=False)
    app.conf.update(
        broker_url=broker.url,
        result_backend=results_url(broker),
        broker_connection_retry_on_startup=True,
    )
    return app


def results_url(broker: RedisServer) -> str:
    return broker.url.rsplit("/", 1)[0] + "/1"


class Workers:
    """``count`` celery workers of ``concurrency`` prefork processes each."""

    def __init__(self, broker: RedisServer, redis_url: str, count: int, concurrency: int) -> None:
        self.broker = broker
        self.redis_url = redis_url
        self.count = count
        self.concurrency = concurrency
        self.directory = Path(tempfile.mkdtemp(prefix="django-rl-celery-"))
        self.processes: list[subprocess.Popen[bytes]] = []

    def log(self, index: int) -> Path:
        return self.directory / f"worker{index}.log"

    def logs(self) -> str:
        return "".join(
            self.log(i).read_text(errors="replace")
            for i in range(self.count)
            if self.log(i).exists()
        )

    def start(self, timeout: float = 60) -> None:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.sites.settings_celery",
            "DJANGO_RL_TEST_REDIS": self.redis_url,
            "DJANGO_RL_TEST_BROKER": self.broker.url,
            "DJANGO_RL_TEST_RESULTS": results_url(self.broker),
            "PYTHONPATH": str(ROOT),
        }
        for index in range(self.count):
            command = [
                *(sys.executable, "-m", "celery", "-A", "tests.tasks.celery_app", "worker"),
                *("--pool", "prefork", "--concurrency", str(self.concurrency)),
                *("--hostname", f"w{index}@django-rl-tests"),
                *("--without-gossip", "--without-mingle", "--without-heartbeat"),
                *("--loglevel", "INFO", "--logfile", str(self.log(index))),
            ]
            process = subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            self.processes.append(process)
            _groups.add(process.pid)
        deadline = time.monotonic() + timeout
        while not all(self._ready(i) for i in range(self.count)):
            for process in self.processes:
                if process.poll() is not None:
                    raise RuntimeError(f"a celery worker exited at start:\n{self.logs()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"celery workers not ready in {timeout} s:\n{self.logs()}")
            time.sleep(0.2)

    def _ready(self, index: int) -> bool:
        log = self.log(index)
        return log.exists() and " ready." in log.read_text(errors="replace")

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()  # a warm shutdown: the pool ends with it
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(15)
            _kill_group(process.pid)
            if process.poll() is None:
                process.wait()
            _groups.discard(process.pid)
        self.processes.clear()


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


@atexit.register
def _kill_leftovers() -> None:
    for pid in list(_groups):
        _kill_group(pid)
    _groups.clear()
