"""One Redis server as this process talks to it: kept connections, its clock, its health."""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from django_rl.backends.capabilities import Capabilities, Learned
from django_rl.backends.clock import ClockUnavailable, ServerClock
from django_rl.backends.connections import (
    Command,
    KeptConnectionClient,
    PoolExhausted,
)
from django_rl.backends.errors import (
    lacks_replicas,
    makes_connections_stale,
    reply_kind,
    unlocated,
)
from django_rl.backends.given_time import given_ms
from django_rl.backends.health import Health
from django_rl.backends.kept_clients import SharedClients
from django_rl.backends.redis_py import unlock_pool_in_child
from django_rl.backends.scripts import replies_with_scripts
from django_rl.conf import get_settings

if TYPE_CHECKING:
    from redis.client import Pipeline

P = ParamSpec("P")
T = TypeVar("T")

logger = logging.getLogger("django_rl")

#: Seconds between two replacements of every connection while the primary
#: answers NOREPLICAS.
REPLACE_INTERVAL = 0.25

#: Kinds of error replies that may mean the server is not what it was taken
#: for (another version behind the same address): its capabilities are
#: learned again.
RELEARN_KINDS = frozenset({"unknown_command", "wrong_arguments"})


class RedisNode(SharedClients):
    """One Redis server: the single one of a ``CACHES`` alias, or a primary of a cluster.

    Holds a redis-py client per thread, each on one connection of the
    server's process-wide pool, shared by threads when the pool is full
    (see :attr:`client`), the estimate of the
    server's clock (:meth:`now_ms`), and the :class:`Health` that logs an
    outage of this server once, not once per request.

    :param alias: the ``CACHES`` alias, for log lines.
    :param address: ``host:port`` when the alias has several servers (a
        cluster), for log lines; ``""`` for a single one.
    :param pooled: the redis-py client of the server's pool; without it,
        :meth:`_connect` makes one when first needed.
    """

    def __init__(self, alias: str, address: str = "", pooled: Redis | None = None) -> None:
        self.alias = alias
        self.address = address
        self._pooled = pooled
        self._local = threading.local()
        #: Every thread's kept client, for threads that find the pool full to share.
        self._kept: weakref.WeakSet[KeptConnectionClient] = weakref.WeakSet()
        self._kept_lock = threading.Lock()
        self.clock = ServerClock(self._read_server_time)
        # When an outage ends, connections left from before it are replaced:
        # in a failover some may still reach the old primary.
        self.health = Health(alias, address, on_end=self.replace_connections)
        self._capabilities = Learned(self.health.name)
        # Bumped when the connections are suspect (see record_failure); a
        # thread whose kept connection is older replaces it on its next call.
        self._generation = 0
        #: (host, port) the kept connections reach (see :meth:`_reached`).
        self._address: tuple[object, object] | None = None
        self._replace_at = 0.0
        #: The auto-pipelined connection an event loop last used to reach this
        #: node, and the generation it was made in (``aio_pools.open_pipe_of``:
        #: its answer without a look-up while one loop decides).
        self.loop_pipe: tuple[Any, int] | None = None
        _live_nodes.add(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} CACHES[{self.alias!r}] {self.address}>".replace(" >", ">")

    @property
    def client(self) -> KeptConnectionClient:
        """Return this thread's redis-py client, which keeps one connection of the pool.

        A command on a pooled client checks a connection out of the pool and
        back in, and first checks that nothing is left unread on it: five
        system calls and about a third of a PING's client-side CPU time (see
        docs/performance.md). A connection kept per thread skips all that.
        Each thread that makes decisions holds one connection of the pool,
        given back when the thread ends; pipelines still take theirs from the
        pool. If Redis is down, building the client raises and nothing is
        kept, so the next call tries again. A connection that broke is
        replaced (see :class:`KeptConnectionClient`), and after any thread met
        an error that makes every connection suspect, each thread replaces its
        own on its next call (see :meth:`record_failure`).

        **A full pool** (more threads decide than the pool's
        ``max_connections``, redis-py's default 100) is no outage: a thread
        that finds it full shares the kept client of another thread (the
        one fewest threads share), taking turns on its connection (its lock,
        see :class:`KeptConnectionClient`); with none to share (the
        application's own calls hold the pool), it waits for a free
        connection. Either wait lasts at most the socket timeout, then
        :class:`PoolExhausted` (logged once per incident, kind ``pool``).
        Shared clients are current ones only: after a change of generation a
        thread shares none from before it.

        :raises redis.exceptions.RedisError: if Redis cannot be reached, or
            :class:`PoolExhausted`.
        """
        local = self._local
        client: KeptConnectionClient | None = getattr(local, "client", None)
        if client is None or local.generation != self._generation:
            if client is not None:
                local.client = None
                self._let_go(client)
            client = self._take_client()
            local.client, local.generation = client, client.generation
        return client

    def _reached(self, connection: object) -> bool:
        """Note where a kept connection connected; return whether that is a new address.

        Under Sentinel each new connection asks the sentinels where the
        primary is, so a connection may reach another server than the others
        do: after a failover, the new primary. When one does, every thread
        replaces its kept connection (see :meth:`replace_connections`), so
        the whole process counts on one primary. Without that, after a forced
        ``SENTINEL FAILOVER`` (the old primary healthy, still taking writes
        until Sentinel demotes it, about 10 s later) threads whose connections
        reach the old primary would go on counting there while new ones count
        on the new primary: twice the limit. A single server's or a cluster
        node's address never changes, so this never fires for them.
        """
        address = (getattr(connection, "host", None), getattr(connection, "port", None))
        known = self._address
        if address == known or address[0] is None:
            return False
        self._address = address
        if known is None:
            return False
        logger.info(
            "Redis for rate limiting (%s): a new connection reaches the primary at %s:%s, "
            "no longer %s:%s; every thread moves its connection there.",
            self.health.name,
            address[0],
            address[1],
            known[0],
            known[1],
        )
        self.replace_connections()
        return True

    @property
    def pooled_client(self) -> Redis:
        """Return the redis-py client of the server's pool (thread-safe)."""
        client = self._pooled
        if client is None:
            client = self._pooled = self._connect()
        return client

    def _connect(self) -> Redis:
        raise NotImplementedError("RedisNode._connect")

    def forget_connections(self) -> None:
        """Drop every thread's client (a forked child must not share its parent's sockets)."""
        self._local = threading.local()
        self._kept = weakref.WeakSet()
        self._kept_lock = threading.Lock()  # (a lock held at the fork stays held)

    @property
    def capabilities(self) -> Capabilities:
        """Return what this server supports, asked of it on first use (see ``capabilities.py``).

        Asked again after the connections were replaced (an outage ended, a
        failover), after a kept connection was found broken and replaced (a
        restart), and after an error reply that says a command or its
        arguments are unknown: the address may now reach another server.
        A server older than the minimum supported version is logged as an
        error, once each time it is learned.

        :raises redis.exceptions.RedisError: if Redis does not answer.
        """
        learned = self._capabilities
        known = learned.known
        return known if known is not None else learned.learn(self._client_of_thread)

    def _client_of_thread(self) -> Redis:
        return self.client

    def forget_capabilities(self) -> None:
        """Make the next call learn the server's capabilities again."""
        self._capabilities.known = None

    def script_time(self) -> str:
        """Return the time argument of the Lua scripts: ``""`` (the script reads
        ``TIME``), this host's time in ms with ``CLOCK: "app"``, or the time a
        caller gave (``backends/given_time.py``: the DRF drop-in's replaced ``timer``)."""
        given = given_ms()
        if given is not None:
            return str(given)
        # self.app_clock, inline: this runs on every decision.
        return str(time.time_ns() // 1_000_000) if get_settings().clock == "app" else ""

    def _read_server_time(self) -> tuple[int, int]:
        seconds, microseconds = self.client.time()
        return int(seconds), int(microseconds)

    @property
    def app_clock(self) -> bool:
        """Return whether decisions take time from this process (``CLOCK: "app"``).

        Read from the settings on each call, so that a change of them
        (``override_settings``) applies at once; ``get_settings`` is cached.
        """
        return get_settings().clock == "app"

    def now_ms(self) -> int:
        """Return the time decisions go by, in ms since the epoch.

        With ``CLOCK: "server"`` (the default), the server's time, estimated
        locally (see ServerClock); with ``CLOCK: "app"``, this host's clock.

        :raises redis.exceptions.RedisError: if the server's clock was never
            measured and Redis does not answer.
        """
        if self.app_clock:
            return time.time_ns() // 1_000_000
        try:
            return self.clock.now_ms()
        except ClockUnavailable as exc:
            # Callers treat Redis trouble as RedisError, whichever call met it.
            raise RedisConnectionError(str(exc)) from exc

    def server_now_ms(self) -> int:
        """Return :meth:`now_ms` for a caller that knows the clock is the server's.

        :raises redis.exceptions.RedisError: as :meth:`now_ms`.
        """
        try:
            return self.clock.now_ms()
        except ClockUnavailable as exc:
            raise RedisConnectionError(str(exc)) from exc

    def now_range_ms(self) -> tuple[int, int]:
        """Return the bounds of this server's time in ms (see ServerClock.now_range_ms).

        :raises redis.exceptions.RedisError: as :meth:`now_ms`.
        """
        try:
            return self.clock.now_range_ms()
        except ClockUnavailable as exc:
            raise RedisConnectionError(str(exc)) from exc

    def run(
        self,
        key: str,
        operation: Callable[Concatenate[RedisNode, str, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Return ``operation(self, key, *args, **kwargs)``, noting whether Redis answered.

        :raises redis.exceptions.RedisError: as ``operation`` does.
        """
        health = self.health
        # Health.epoch, inline; see Health: calls that straddle a change.
        epoch = health._epoch
        try:
            result = operation(self, key, *args, **kwargs)
        except RedisError as exc:
            self.record_failure(exc, epoch)
            raise
        # Health.succeeded's own first tests, inline (this runs on every
        # decision): nothing to record while Redis is up and no incident of
        # error replies is open.
        if health.down or health._replies_seen:
            self.record_success(epoch)
        return result

    def pipeline(self, queue: Callable[[Pipeline], T]) -> tuple[T, list[Any]]:
        """Run the commands ``queue`` puts on a pipeline, in one round trip; return both.

        Return what ``queue`` returned and the replies, in order. The
        commands go out on this thread's kept connection, not as a
        transaction: each must be a read, or a write that may run twice
        (``DEL``), and touch one key or none. A script the server does not
        know (NOSCRIPT: a restarted server, ``SCRIPT FLUSH``) fails inside
        the pipeline; then every script is loaded and the commands are sent
        again. On a Redis Cluster each command that meets ``ASK`` (its key
        has moved to the node importing its slot) is sent there, after
        ``ASKING`` (see :class:`~django_rl.backends.cluster.ClusterMember`).

        :raises redis.exceptions.RedisError: if Redis cannot answer, or a
            command fails for another reason (the first such error).
        """
        recorder = self.client.pipeline(transaction=False)
        queued = queue(recorder)
        commands: list[Command] = list(recorder.command_stack)
        replies = self._replies(commands)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return queued, replies

    def _replies(self, commands: Sequence[Command]) -> list[Any]:
        """Return the replies to ``commands`` (errors in place), scripts loaded if need be."""
        return replies_with_scripts(self.client, commands)

    def record_failure(self, exc: Exception, epoch: int | None = None) -> None:
        """Note that a call started in ``epoch`` failed; log the start of an outage once.

        An error reply of a live server (OOM, NOPERM, WRONGTYPE, ...: see
        ``errors.py``) is no outage: the connection that carried it is good
        and kept, the next call asks again, and its cause is logged once per
        incident. It even ends an outage under way: the server answers. Nor
        is :class:`PoolExhausted` (see :attr:`client`): logged once per
        incident, it changes nothing about the connections.

        After an error that says the server is gone, hung, restarting or no
        longer the primary, every connection is suspect: the pool's idle ones
        are closed, and each thread replaces its kept one on its next call, so
        the next calls connect afresh instead of each finding out on a stale
        one. That matters most after a failover that repoints an address
        (DNS, a Kubernetes Service, a proxy, Sentinel) at the new primary:
        connections opened before it still reach the demoted one, which
        answers READONLY, and would be reused forever. A connection in use by
        another thread is left to finish its call.
        """
        if isinstance(exc, PoolExhausted):
            # No connection came free in time: this process' pool, not the server.
            self.health.pool_exhausted(exc)
            return
        kind = reply_kind(exc)
        if kind is not None:
            if kind in RELEARN_KINDS:
                self.forget_capabilities()
            # An answer: it may end an outage (health replaces the connections then).
            self.health.answered_with_error(exc, kind, epoch)
            return
        if unlocated(exc):
            # No sentinel could name the primary, for a new connection: the
            # primary may be fine, and every connection already open to it
            # keeps counting. Replacing them would turn an outage of the
            # sentinels into one of the limiter.
            self.health.unlocated(exc)
            return
        if makes_connections_stale(exc):
            if lacks_replicas(exc):
                # It may refuse for long (a one-replica group after a
                # failover, until the old primary rejoins as a replica): new
                # connections are tried every REPLACE_INTERVAL, not per call.
                now = time.monotonic()
                if now >= self._replace_at:
                    self._replace_at = now + REPLACE_INTERVAL
                    self.replace_connections()
            else:
                self.replace_connections()
        self.health.failed(exc, epoch)

    def record_success(self, epoch: int | None = None) -> None:
        """Note that a call started in ``epoch`` succeeded; log the end of an outage once.

        When an outage ends, connections left from before it are replaced as
        well (``Health``'s ``on_end``): in a failover some may still reach
        the old primary.
        """
        self.health.succeeded(epoch)

    def replace_connections(self) -> None:
        """Make every thread replace its kept connection, and close the pool's idle ones."""
        self._generation += 1
        # The connections may reach another server now (a failover, a restart
        # on another version): learn what it supports again.
        self.forget_capabilities()
        pooled = self._pooled
        if pooled is not None:
            # Idle ones only: closing one in use would break another thread's
            # call, perhaps one of the application's own cache calls.
            pooled.connection_pool.disconnect(inuse_connections=False)


_live_nodes: weakref.WeakSet[RedisNode] = weakref.WeakSet()
#: Run in a forked child, after the nodes have forgotten their connections.
after_fork_hooks: list[Callable[[], None]] = []


def _after_fork_in_child() -> None:
    for node in list(_live_nodes):
        # First the pool's locks (one another thread held at the fork stays
        # held): the clients dropped next give their connections back to it.
        pooled = node._pooled
        if pooled is not None:
            unlock_pool_in_child(pooled.connection_pool)
        node.forget_connections()
    for hook in after_fork_hooks:
        hook()


os.register_at_fork(after_in_child=_after_fork_in_child)
