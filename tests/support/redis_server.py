"""A private redis-server for the tests: started on a free port, stopped by pid.

The suite owns this server, so tests may flush, kill, pause and restart it.
It never touches any other Redis (such as a shared one on 6379).

Every process started here is also remembered until it is reaped, and killed
when the test process exits (normally, by an uncaught error, or on SIGTERM),
so that a crashed session leaves no server behind.
"""

from __future__ import annotations

import atexit
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.support import servers

#: Processes started by the tests and not reaped yet.
_running: set[subprocess.Popen[bytes]] = set()


def spawn(args: Sequence[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start a process the suite owns; it is killed at exit if nothing stopped it before.

    ``env``: variables added to this process' environment for it.
    """
    process = subprocess.Popen(
        args,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **env} if env else None,
    )
    _running.add(process)
    return process


def reap(process: subprocess.Popen[bytes], timeout: float = 5) -> None:
    """Stop ``process`` (SIGCONT, SIGTERM, then SIGKILL after ``timeout``) and wait for it."""
    if process.poll() is None:
        process.send_signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    _running.discard(process)


@atexit.register
def _kill_leftovers() -> None:
    for process in list(_running):
        if process.poll() is None:
            process.kill()
            process.wait()
    _running.clear()
    servers.cleanup()


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds: fixtures' finalizers, then atexit


if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)


def _credentials() -> str:
    return f"{servers.ACL_USER}:{servers.ACL_PASSWORD}@" if servers.ACL_MODE else ""


def _port_range() -> range | None:
    """Return the ports ``DJANGO_RL_PORTS`` (``"7400-7499"``) allows, or ``None`` (any)."""
    text = os.environ.get("DJANGO_RL_PORTS", "").strip()
    if not text:
        return None
    low, _, high = text.partition("-")
    return range(int(low), int(high or low) + 1)


def forget_pools_of(port: int) -> None:
    """Drop django-redis' pools of URLs naming ``port`` on this host.

    django-redis keeps one pool per URL for the process's life, whatever the
    other options (``CONNECTION_POOL_KWARGS``) of the cache that made it. A
    new server on a port an earlier one of the suite used (ports are reused)
    must not inherit that pool: its options (e.g. another ``protocol``) and
    its dead connections. A server restarted on its own port keeps them, as
    a deployment's would.
    """
    try:
        from django_redis.pool import ConnectionFactory
    except ImportError:
        return
    pools = ConnectionFactory._pools
    for url in list(pools):
        try:
            parsed = urlsplit(url)
            named = parsed.hostname == "127.0.0.1" and parsed.port == port
        except ValueError:  # not a URL with a port (a socket's path)
            continue
        if named:
            pools.pop(url).disconnect()


def free_port() -> int:
    """Return a port of 127.0.0.1 that nothing is bound to now.

    Any free port, or one of those ``DJANGO_RL_PORTS`` names (``"7400-7499"``:
    on a machine shared with other servers, everything the suite and the
    benches start stays in that range), tried in a random order.
    """
    allowed = _port_range()
    if allowed is None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    for port in random.sample(allowed, len(allowed)):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in DJANGO_RL_PORTS={os.environ['DJANGO_RL_PORTS']}")


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
    """One redis-server process with no persistence, bound to 127.0.0.1.

    :param binary: the server program (default: the server the suite runs
        on, see ``tests/support/servers.py``: ``redis-server`` on PATH unless
        ``DJANGO_RL_TEST_SERVER`` names another).
    :param env: environment variables the server runs with (e.g. libfaketime's).

    In the ``acl`` and ``tls`` modes of ``tests/support/servers.py`` the server also
    has django_rl's ACL user (and a TLS port): :meth:`django_rl_url` is how
    django_rl connects to it, :attr:`url` how the suite's own clients do.
    """

    def __init__(self, binary: str | None = None, env: dict[str, str] | None = None) -> None:
        self.command = [binary] if binary else servers.server_command()
        # A server program named by the test (a Valkey under a moved clock)
        # stays plain: only the suite's own servers take on the TLS mode.
        self.tls = servers.TLS_MODE and not binary
        self.binary = self.command[-1]
        self.env = env
        self.port = 0
        self.tls_port = 0
        self.port_for_tls = 0
        self.extra_args: Sequence[str] = ()
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.directory = tempfile.mkdtemp(prefix="django-rl-redis-")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def django_rl_url(self) -> str:
        """Return the URL django_rl connects with: as the ACL user, over TLS, per the mode."""
        if self.tls:
            return f"rediss://{_credentials()}127.0.0.1:{self.tls_port}/0"
        return f"redis://{_credentials()}127.0.0.1:{self.port}/0"

    def client(self, socket_timeout: float = 5) -> redis.Redis:
        """A plain client that tries each call once (redis-py's own default retries 10 times)."""
        return redis.Redis(
            port=self.port, socket_timeout=socket_timeout, retry=Retry(NoBackoff(), 0)
        )

    def start(self, port: int | None = None, extra_args: Sequence[str] = ()) -> None:
        """Start the server (on ``port``, or a free one) and wait until it answers PING.

        ``extra_args`` are more ``redis-server`` options, e.g. ``["--key-load-delay", "100"]``.
        A ``dump.rdb`` left in the server's directory (by ``SAVE``) is loaded.
        """
        for _attempt in range(5):
            self._spawn(port or free_port(), extra_args)
            if self._wait_ready():
                self._add_user()
                if port is None:
                    forget_pools_of(self.port)
                return
            self.stop()  # the port was taken in between: try another
            if port:
                break
        raise RuntimeError(f"redis-server did not start; see {self.directory}/redis.log")

    def _add_user(self) -> None:
        """Give the server django_rl's ACL user in the ``acl`` and ``tls`` modes."""
        if not servers.ACL_MODE:
            return
        client = self.client()
        try:
            client.execute_command("ACL", "SETUSER", *servers.acl_setuser_args())
        finally:
            client.close()

    def _spawn(self, port: int, extra_args: Sequence[str]) -> None:
        self.port = port
        self.extra_args = extra_args
        tls_args: list[str] = []
        if self.tls:
            # The TLS port is kept across restarts, like the plain one.
            if not self.tls_port or port != self.port_for_tls:
                self.tls_port = free_port()
                self.port_for_tls = port
            tls_args = servers.certificates().server_args(self.tls_port)
        self.process = spawn(
            [
                *self.command,
                "--port",
                str(port),
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
                *tls_args,
                *extra_args,
            ],
            self.env,
        )

    def _wait_ready(self, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        client = self.client(socket_timeout=1)
        try:
            while time.monotonic() < deadline:
                if self.process is None or self.process.poll() is not None:
                    return False
                try:
                    if client.ping():
                        return True
                except redis.ConnectionError:  # refused, or LOADING (a subclass)
                    time.sleep(0.01)
            return False
        finally:
            client.close()

    def restart(self, extra_args: Sequence[str] = ()) -> None:
        """Stop the server if it runs, then start it again on the same port."""
        self.stop()
        self.start(port=self.port, extra_args=extra_args)

    def save_filler(self, keys: int = 3000) -> None:
        """Write ``keys`` filler keys and save them to ``dump.rdb`` for :meth:`restart_loading`."""
        client = self.client()
        try:
            pipe = client.pipeline(transaction=False)
            for i in range(keys):
                pipe.set(f"filler:{i}", "x")
            pipe.execute()
            client.save()
        finally:
            client.close()

    def restart_loading(self, load_delay_us: int = 300) -> None:
        """Restart the server on its port and return as soon as it answers LOADING.

        It loads the ``dump.rdb`` of :meth:`save_filler` at ``load_delay_us``
        microseconds a key (Redis' own ``key-load-delay`` test setting), so
        it answers LOADING for about keys x delay. The dump is deleted once
        loading has begun, so later restarts start empty.
        """
        self.stop()
        args = ["--key-load-delay", str(load_delay_us)]
        args += ["--loading-process-events-interval-bytes", "1024"]
        self._spawn(self.port, args)
        probe = self.client(socket_timeout=1)
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    probe.ping()
                except redis.BusyLoadingError:
                    os.unlink(os.path.join(self.directory, "dump.rdb"))
                    return
                except redis.ConnectionError:
                    time.sleep(0.005)
                else:
                    raise RuntimeError("redis-server loaded before it could be seen loading")
        finally:
            probe.close()
        raise RuntimeError(f"redis-server did not start loading; see {self.directory}/redis.log")

    def wait_until_answering(self, timeout: float = 10) -> None:
        """Wait until the server answers PING (not refused, not LOADING)."""
        if not self._wait_ready(timeout):
            raise RuntimeError(f"redis-server does not answer; see {self.directory}/redis.log")

    def wait_until_synced(self, timeout: float = 10) -> None:
        """Wait until this replica's link to its primary is up."""
        client = self.client()
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if client.info("replication").get("master_link_status") == "up":
                    return
                time.sleep(0.02)
        finally:
            client.close()
        raise RuntimeError("the replica did not sync with its primary")

    def pause(self) -> None:
        """SIGSTOP the server: it keeps its connections but answers nothing, as a hung host."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT a paused server."""
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 5 s) and reap it."""
        process, self.process = self.process, None
        self.paused = False
        if process is not None:
            reap(process)

    def kill(self) -> None:
        """SIGKILL the server, as a crash would."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
            _running.discard(self.process)
            self.process = None
            self.paused = False

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
