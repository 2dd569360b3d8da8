"""Redis through a django-redis connection: scripts, transactions, the server clock."""

from __future__ import annotations

import hashlib
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from django.core.signals import setting_changed
from django.dispatch import receiver
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ReadOnlyError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from django_rl.backends.clock import ClockUnavailable, ServerClock
from django_rl.backends.health import Health
from django_rl.exceptions import ConfigurationError

if TYPE_CHECKING:
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

    def transaction_replies(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Run ``commands`` in one MULTI/EXEC on the kept connection; return their replies.

        One write and one read, as a redis-py transaction pipeline, but
        without its checkout of a connection from the pool (which costs more
        client time than the round trip's own work). A ``ConnectionError`` on
        a connection that has worked before is sent once more, on a new
        connection, as in :meth:`execute_command`.

        :raises redis.exceptions.RedisError: if Redis cannot answer, or any
            command fails (the first error reply is raised).
        """
        try:
            replies = self._run_transaction(commands)
        except RedisConnectionError:
            if not self._worked:
                raise
            self._worked = False
            replies = self._run_transaction(commands)
        self._worked = True
        return replies

    def _run_transaction(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        # redis-py's Connection is untyped; Any keeps mypy --strict quiet about it.
        connection: Any = self.connection
        assert connection is not None, "a kept-connection client always holds one"
        packed = connection.pack_commands([("MULTI",), *commands, ("EXEC",)])
        # No lock: a kept-connection client belongs to one thread.
        try:
            connection.send_packed_command(packed)
            for _ in range(len(commands) + 1):
                connection.read_response()  # +OK for MULTI, +QUEUED for each command
            replies: list[Any] = connection.read_response()
        except BaseException:
            # Replies may be left unread on the socket: it cannot be reused as is.
            connection.disconnect()
            raise
        for reply in replies:
            if isinstance(reply, ResponseError):
                raise reply
        return replies


class RedisBackend:
    """The Redis behind one ``CACHES`` alias, shared by every policy that uses it.

    Holds a redis-py client per thread, each on one connection of
    django-redis's process-wide pool (see :attr:`client`), the server clock
    estimate, and the :class:`Health` that logs an outage once, not once per
    request.
    """

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self._pooled: Redis | None = None
        self._local = threading.local()
        self.clock = ServerClock(self._read_server_time)
        self.health = Health(alias)
        # Bumped when the connections are suspect (see record_failure); a
        # thread whose kept connection is older replaces it on its next call.
        self._generation = 0
        _live_backends.add(self)

    @property
    def client(self) -> KeptConnectionClient:
        """Return this thread's redis-py client, which keeps one connection of the pool.

        A command on a pooled client checks a connection out of the pool and
        back in, and first checks that nothing is left unread on it: five
        system calls and about a third of a PING's client-side CPU time (see
        docs/performance.md). A connection kept per thread skips all that.
        Each thread that makes decisions holds one connection of django-redis's
        pool, given back when the thread ends; pipelines still take theirs from
        the pool. If Redis is down, building the client raises and nothing is
        kept, so the next call tries again. A connection that broke is
        replaced (see :class:`KeptConnectionClient`), and after any thread met
        an error that makes every connection suspect, each thread replaces its
        own on its next call (see :meth:`record_failure`).
        """
        local = self._local
        client: KeptConnectionClient | None = getattr(local, "client", None)
        if client is None or local.generation != self._generation:
            if client is not None:
                local.client = None
                _discard(client)
            generation = self._generation
            client = KeptConnectionClient(
                connection_pool=self.pooled_client.connection_pool, single_connection_client=True
            )
            local.client, local.generation = client, generation
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
        longer the primary, every connection is suspect: the pool's idle ones
        are closed, and each thread replaces its kept one on its next call, so
        the next calls connect afresh instead of each finding out on a stale
        one. That matters most after a failover that repoints an address
        (DNS, a Kubernetes Service, a proxy) at the new primary: connections
        opened before it still reach the demoted one, which answers READONLY,
        and would be reused forever. A connection in use by another thread is
        left to finish its call. Errors of a healthy server (an OOM or
        WRONGTYPE reply) leave the connections alone.
        """
        if isinstance(exc, _STALE_CONNECTION_ERRORS):
            self._replace_connections()
        self.health.failed(exc, epoch)

    def record_success(self, epoch: int | None = None) -> None:
        """Note that a call started in ``epoch`` succeeded; log the end of an outage once.

        When an outage ends, connections left from before it are replaced as
        well: in a failover some may still reach the old primary.
        """
        if self.health.succeeded(epoch):
            self._replace_connections()

    def _replace_connections(self) -> None:
        self._generation += 1
        # Idle ones only: closing one in use would break another thread's
        # call, perhaps one of the application's own cache calls.
        self.pooled_client.connection_pool.disconnect(inuse_connections=False)


def _discard(client: Redis) -> None:
    """Close a kept connection and hand it back to the pool (closed, so never reused as is)."""
    connection = client.connection
    if connection is not None:
        connection.disconnect()  # type: ignore[no-untyped-call]
    client.close()


#: Errors after which every connection is as suspect as the one that failed
#: (BusyLoadingError, LOADING, is a ConnectionError).
_STALE_CONNECTION_ERRORS = (RedisConnectionError, RedisTimeoutError, ReadOnlyError)


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
