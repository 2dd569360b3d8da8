"""Redis through a django-redis connection: scripts, transactions, the server clock."""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from django.core.signals import setting_changed
from django.dispatch import receiver
from redis.exceptions import NoScriptError

from django_rl.backends.clock import ServerClock
from django_rl.exceptions import ConfigurationError

if TYPE_CHECKING:
    from redis import Redis
    from redis.client import Pipeline

logger = logging.getLogger("django_rl")

T = TypeVar("T")


class LuaScript:
    """A Lua script run with EVALSHA, loaded into the server on NOSCRIPT.

    The script is sent in full only the first time a server (or a server
    whose script cache was flushed) sees it; every later call sends its SHA1.
    It works with any client or pipeline, so one instance serves every
    connection of the process.
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
            client.script_load(self.source)
            return client.evalsha(self.sha, len(keys), *keys, *args)

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
    django-redis's process-wide pool) and the server clock estimate. It also
    tracks outages so that a dead Redis logs one warning, not one per request.
    """

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self._client: Redis | None = None
        self.clock = ServerClock(self._read_server_time)
        self._outage = False
        self._outage_lock = threading.Lock()

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
