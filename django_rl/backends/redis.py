"""Redis through a django-redis connection: scripts, transactions, the server clock."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from django.core.signals import setting_changed
from django.dispatch import receiver
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ReadOnlyError
from redis.exceptions import TimeoutError as RedisTimeoutError

from django_rl.backends.clock import ClockUnavailable, ServerClock
from django_rl.backends.health import Health
from django_rl.exceptions import ConfigurationError

if TYPE_CHECKING:
    from redis import Redis
    from redis.client import Pipeline

T = TypeVar("T")


class LuaScript:
    """A Lua script run with EVALSHA, sent in full on NOSCRIPT.

    The script is sent in full only the first time a server (or a server
    whose script cache was flushed, or a new server after a restart or a
    failover) sees it; every later call sends its SHA1. On NOSCRIPT the call
    is repeated as EVAL, which runs the script and caches it in the same
    round trip (``SCRIPT LOAD`` then EVALSHA would take two). It works with
    any client, so one instance serves every connection of the process.
    """

    #: Every script made, so that a pipeline that met NOSCRIPT can load them.
    instances: ClassVar[list[LuaScript]] = []

    def __init__(self, source: str, name: str = "script") -> None:
        self.name = name
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()
        LuaScript.instances.append(self)

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
            return client.eval(self.source, len(keys), *keys, *args)

    def queue(self, pipe: Pipeline, keys: Sequence[str], args: Sequence[Any]) -> None:
        """Queue the script on a pipeline; :func:`run_reads` handles NOSCRIPT."""
        pipe.evalsha(self.sha, len(keys), *keys, *args)


def run_reads(client: Redis, queue: Callable[[Pipeline], T]) -> tuple[T, list[Any]]:
    """Run the read-only commands ``queue`` puts on a pipeline, in one round trip.

    Return what ``queue`` returned and the replies. A script the server does
    not know (NOSCRIPT: a restarted server, ``SCRIPT FLUSH``) fails inside the
    pipeline; then every script is loaded and the pipeline is built and run
    again, which is harmless because nothing in it writes.

    :raises redis.exceptions.RedisError: if Redis cannot answer, or a command
        fails for another reason.
    """
    try:
        return _run_pipeline(client, queue)
    except NoScriptError:
        for script in LuaScript.instances:
            client.script_load(script.source)
    return _run_pipeline(client, queue)


def _run_pipeline(client: Redis, queue: Callable[[Pipeline], T]) -> tuple[T, list[Any]]:
    pipe = client.pipeline(transaction=False)
    queued = queue(pipe)
    return queued, pipe.execute()


class RedisBackend:
    """The Redis behind one ``CACHES`` alias, shared by every policy that uses it.

    Holds one redis-py client (thread-safe; it checks connections out of
    django-redis's process-wide pool), the server clock estimate, and the
    :class:`Health` that logs an outage once, not once per request.
    """

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self._client: Redis | None = None
        self.clock = ServerClock(self._read_server_time)
        self.health = Health(alias)

    @property
    def client(self) -> Redis:
        """Return the redis-py client of the alias' django-redis cache."""
        client = self._client
        if client is None:
            client = self._client = self._connect()
        return client

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
        """Return the Redis server's time in ms, estimated locally (see ServerClock).

        :raises redis.exceptions.RedisError: if the clock was never measured
            and Redis does not answer.
        """
        try:
            return self.clock.now_ms()
        except ClockUnavailable as exc:
            # Callers treat Redis trouble as RedisError, whichever call met it.
            raise RedisConnectionError(str(exc)) from exc

    def record_failure(self, exc: Exception, epoch: int | None = None) -> None:
        """Note that a call started in ``epoch`` failed; log the start of an outage once.

        After an error that says the server is gone, hung, restarting or no
        longer the primary, the pool's idle connections are closed too, so
        the next calls connect afresh instead of each finding out on a stale
        one. That matters most after a failover that repoints an address
        (DNS, a Kubernetes Service, a proxy) at the new primary: connections
        opened before it still reach the demoted one, which answers READONLY,
        and a pool would reuse them forever. A connection in use by another
        thread is closed by its own failure. Errors of a healthy server (an
        OOM or WRONGTYPE reply) leave the pool alone.
        """
        if isinstance(exc, _STALE_POOL_ERRORS):
            self._drop_idle_connections()
        self.health.failed(exc, epoch)

    def record_success(self, epoch: int | None = None) -> None:
        """Note that a call started in ``epoch`` succeeded; log the end of an outage once.

        When an outage ends, idle connections left from before it are closed
        as well: in a failover some may still reach the old primary.
        """
        if self.health.succeeded(epoch):
            self._drop_idle_connections()

    def _drop_idle_connections(self) -> None:
        # Idle ones only: closing one in use would break another thread's
        # call, perhaps one of the application's own cache calls.
        self.client.connection_pool.disconnect(inuse_connections=False)


#: Errors after which the pool's idle connections are as suspect as the one
#: that failed (BusyLoadingError, LOADING, is a ConnectionError).
_STALE_POOL_ERRORS = (RedisConnectionError, RedisTimeoutError, ReadOnlyError)


_backends: dict[str, RedisBackend] = {}
_backends_lock = threading.Lock()


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
