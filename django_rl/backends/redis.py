"""Redis through a django-redis connection: scripts, transactions, the server clock."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import weakref
from collections.abc import Sequence
from importlib import resources
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError

from django_rl.backends.clock import ServerClock
from django_rl.exceptions import ConfigurationError

logger = logging.getLogger("django_rl")


class LuaScript:
    """A Lua script run with EVALSHA, loaded into the server on NOSCRIPT.

    The script is sent in full only the first time a server (or a server
    whose script cache was flushed) sees it; every later call sends its SHA1.
    It works with any client or pipeline, so one instance serves every
    connection of the process.
    """

    def __init__(self, source: str, name: str = "script") -> None:
        self.name = name
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    @classmethod
    def from_package(cls, package: str, filename: str) -> LuaScript:
        """Load ``filename`` that ships inside ``package``."""
        source = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
        return cls(source, name=filename)

    def __call__(self, client: Redis, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run the script on ``client`` and return its reply."""
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            client.script_load(self.source)
            return client.evalsha(self.sha, len(keys), *keys, *args)


class KeptConnectionClient(Redis):
    """A redis-py client on one connection that it keeps (``single_connection_client``).

    A pooled client notices a connection the server has closed (a restart, a
    failover) before it sends, at the price of system calls on every command.
    This one notices when a command fails, so a command that fails with
    ``ConnectionError`` on a connection that has worked before is sent once
    more, on a new connection: a Redis restart costs no decision. (Had the
    first one reached the server before the connection broke, a hit would
    count twice: a denial slightly early, never one allowed too many.) During
    an outage, after that one retry, nothing is sent twice.
    """

    _worked = False

    def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            result = super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        except RedisConnectionError:
            if not self._worked:
                raise
            self._worked = False
            result = super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        self._worked = True
        return result


class RedisBackend:
    """The Redis behind one ``CACHES`` alias, shared by every policy that uses it.

    Holds a redis-py client per thread, each on one connection of
    django-redis's process-wide pool (see :attr:`client`), and the server
    clock estimate. It also tracks outages so that a dead Redis logs one
    warning, not one per request.
    """

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self._pooled: Redis | None = None
        self._local = threading.local()
        self.clock = ServerClock(self._read_server_time)
        self._outage = False
        self._outage_lock = threading.Lock()
        _live_backends.add(self)

    @property
    def client(self) -> Redis:
        """Return this thread's redis-py client, which keeps one connection of the pool.

        A command on a pooled client checks a connection out of the pool and
        back in, and first checks that nothing is left unread on it: five
        system calls and about a third of a PING's client-side CPU time (see
        docs/performance.md). A connection kept per thread skips all that.
        Each thread that makes decisions holds one connection of django-redis's
        pool, given back when the thread ends; pipelines still take theirs from
        the pool. If Redis is down, building the client raises and nothing is
        kept, so the next call tries again; a connection that broke is replaced
        (see :class:`KeptConnectionClient`).
        """
        client: Redis | None = getattr(self._local, "client", None)
        if client is None:
            client = KeptConnectionClient(
                connection_pool=self.pooled_client.connection_pool, single_connection_client=True
            )
            self._local.client = client
        return client

    @property
    def pooled_client(self) -> Redis:
        """Return the redis-py client of the alias' django-redis cache (thread-safe)."""
        client = self._pooled
        if client is None:
            client = self._pooled = self._connect()
        return client

    def forget_connections(self) -> None:
        """Drop every thread's client (a forked child must not share its parent's sockets)."""
        self._local = threading.local()

    def _connect(self) -> Redis:
        from django_redis import get_redis_connection

        try:
            client: Redis = get_redis_connection(self.alias, write=True)
        except NotImplementedError as exc:
            raise ConfigurationError(
                f"CACHES[{self.alias!r}] is not a django-redis cache",
                check_id="django_rl.E004",
                hint="Set its BACKEND to 'django_redis.cache.RedisCache'",
            ) from exc
        return client

    def _read_server_time(self) -> tuple[int, int]:
        seconds, microseconds = self.client.time()
        return int(seconds), int(microseconds)

    def now_ms(self) -> int:
        """Return the Redis server's time in ms, estimated locally (see ServerClock)."""
        return self.clock.now_ms()

    def record_failure(self, exc: Exception) -> None:
        """Log the start of an outage once per process."""
        if self._outage:
            return
        with self._outage_lock:
            if not self._outage:
                self._outage = True
                logger.warning(
                    "Redis for rate limiting (CACHES[%r]) is unavailable (%s: %s); "
                    "decisions follow FAIL_OPEN until it answers again.",
                    self.alias,
                    type(exc).__name__,
                    exc,
                )

    def record_success(self) -> None:
        """Log the end of an outage, if one was logged."""
        if self._outage:
            with self._outage_lock:
                if self._outage:
                    self._outage = False
                    logger.info("Redis for rate limiting (CACHES[%r]) is back.", self.alias)


_backends: dict[str, RedisBackend] = {}
_backends_lock = threading.Lock()
_live_backends: weakref.WeakSet[RedisBackend] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for backend in list(_live_backends):
        backend.forget_connections()


os.register_at_fork(after_in_child=_after_fork_in_child)


def get_backend(alias: str) -> RedisBackend:
    """Return the shared backend of a ``CACHES`` alias."""
    try:
        return _backends[alias]
    except KeyError:
        with _backends_lock:
            return _backends.setdefault(alias, RedisBackend(alias))


@receiver(setting_changed)
def _forget_backends(*, setting: str, **kwargs: object) -> None:
    if setting == "CACHES":
        _backends.clear()
