"""A Redis Cluster: each key to the primary that owns its slot, the topology kept up to date.

Decisions do not go through redis-py's ``RedisCluster.execute_command``. On
a connection error or a timeout it reads the topology again, synchronously,
and retries (10 times by default): while a primary hangs, one call waits for
many socket timeouts (2.24 s at a 0.2 s timeout, measured). Instead, the
slot of a key (its hash tag: the identity) picks a :class:`ClusterMember`, a
:class:`RedisNode` on that primary's connection pool, so a decision is one
round trip on a kept connection, its ``TIME`` comes from that node, and it
waits at most one socket timeout.

The topology is read by ``RedisCluster`` when it starts (``CLUSTER SLOTS``)
and again, in a background thread, whenever a node fails, answers
``MOVED`` or says the cluster is down, and every :data:`REFRESH_INTERVAL`
for as long as decisions keep failing, so that a replica promoted in a
failover serves decisions a moment after its promotion. No decision waits
for a refresh but a process's first, which reads the slot table. A
``MOVED`` reply (a slot resharded, or a failover this process has not seen)
is followed once, at once, to the node it names.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    RedisClusterException,
    RedisError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from django_rl.backends.errors import makes_connections_stale
from django_rl.backends.health import Health
from django_rl.backends.node import STALE_CONNECTION_ERRORS, RedisNode, after_fork_hooks
from django_rl.exceptions import ConfigurationError

if TYPE_CHECKING:
    from redis import Redis
    from redis.cluster import ClusterNode, RedisCluster

P = ParamSpec("P")
T = TypeVar("T")

logger = logging.getLogger("django_rl")

#: Seconds between two reads of the topology while a primary does not answer.
REFRESH_INTERVAL = 0.25
#: Errors that say the slot table may be out of date.
TOPOLOGY_ERRORS = (*STALE_CONNECTION_ERRORS, ClusterDownError, TryAgainError, AskError)


class ClusterMember(RedisNode):
    """A primary of the cluster; errors that say the topology changed ask for a new read of it.

    A redirect (``MOVED``, ``ASK``) is an answer, not an outage: it changes
    nothing in the node's health.
    """

    def __init__(self, backend: ClusterBackend, address: str, pooled: Redis) -> None:
        super().__init__(backend.alias, address, pooled)
        self._backend = weakref.ref(backend)

    def record_failure(self, exc: Exception, epoch: int | None = None) -> None:
        if not isinstance(exc, AskError):  # MovedError is an AskError
            super().record_failure(exc, epoch)
        if isinstance(exc, TOPOLOGY_ERRORS) or makes_connections_stale(exc):
            backend = self._backend()
            if backend is not None:
                backend.refresh_soon()


class ClusterBackend:
    """The Redis Cluster behind one ``CACHES`` alias whose client is ``RedisClusterClient``.

    :ivar health: whether the topology could be read; each primary has a
        health of its own.
    """

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.health = Health(alias)
        self._cluster: RedisCluster | None = None
        #: Slot -> the member that serves it (``None``: no node does).
        self._table: list[ClusterMember | None] | None = None
        self._members: dict[str, ClusterMember] = {}
        self._primaries: list[ClusterMember] = []
        self._load_lock = threading.Lock()
        self._load_failed_at = 0.0
        self._refresh_lock = threading.Lock()
        self._refresher: threading.Thread | None = None
        self._stale = False
        _live_clusters.add(self)

    def __repr__(self) -> str:
        return f"<ClusterBackend CACHES[{self.alias!r}]>"

    @property
    def cluster(self) -> RedisCluster:
        """Return the alias' ``RedisCluster`` client, shared with the Django cache.

        :raises redis.exceptions.RedisClusterException: if none of the
            startup nodes answers (the first time only).
        """
        cluster = self._cluster
        if cluster is None:
            from django_redis import get_redis_connection
            from redis.cluster import RedisCluster

            client = get_redis_connection(self.alias, write=True)
            if not isinstance(client, RedisCluster):
                raise ConfigurationError(
                    f"CACHES[{self.alias!r}] uses RedisClusterClient but did not connect "
                    "to a Redis Cluster",
                    check_id="django_rl.E060",
                    hint="Leave its CONNECTION_FACTORY and REDIS_CLIENT_CLASS unset",
                )
            cluster = self._cluster = client
        return cluster

    def node_for(self, key: str) -> ClusterMember:
        table = self._table
        if table is None:
            table = self._load()
        slot = key_slot(key.encode())
        member = table[slot]
        if member is None:
            raise ClusterDownError(f"slot {slot} is served by no node of the cluster")
        return member

    def nodes(self) -> list[RedisNode]:
        if self._table is None:
            self._load()
        return list(self._primaries)

    def run(
        self,
        key: str,
        operation: Callable[Concatenate[RedisNode, str, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        node = self.node_for(key)
        try:
            return node.run(key, operation, *args, **kwargs)
        except MovedError as exc:
            # Nothing ran: the node does not serve the slot any more. One
            # redirect, at once; the whole table is read again meanwhile.
            return self._moved(exc).run(key, operation, *args, **kwargs)

    def refresh_soon(self) -> None:
        """Read the topology again in the background, and again while decisions keep failing."""
        with self._refresh_lock:
            self._stale = True
            if self._refresher is not None:
                return
            self._refresher = threading.Thread(
                target=self._refresh_loop, name=f"django_rl cluster {self.alias}", daemon=True
            )
            self._refresher.start()

    def forget_connections(self) -> None:
        """Forget what a forked child cannot use: locks and the refresher of its parent."""
        self._load_lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        self._refresher = None

    def _load(self) -> list[ClusterMember | None]:
        """Read the slot table the first time; one thread does, the others wait for it.

        A thread that waited for a read that failed raises at once rather
        than try again: while the cluster is unreachable, a queue of threads
        costs one socket timeout, not one each.
        """
        asked_at = time.monotonic()
        with self._load_lock:
            table = self._table
            if table is not None:
                return table
            if self._load_failed_at >= asked_at:
                raise RedisConnectionError("the Redis Cluster's topology could not be read")
            try:
                table = self._rebuild(self.cluster)
            except (RedisError, RedisClusterException) as exc:
                self._load_failed_at = time.monotonic()
                self.health.failed(exc)
                if isinstance(exc, RedisError):
                    raise
                raise RedisConnectionError(str(exc)) from exc
        self.health.succeeded()
        return table

    def _rebuild(self, cluster: RedisCluster) -> list[ClusterMember | None]:
        """Make the slot table of what ``cluster`` knows; members that did not change are kept."""
        slots = cluster.nodes_manager.slots_cache
        members: dict[str, ClusterMember] = {}
        table: list[ClusterMember | None] = []
        for slot in range(REDIS_CLUSTER_HASH_SLOTS):
            serving = slots.get(slot)
            if not serving:
                table.append(None)
                continue
            primary = serving[0]
            member = members.get(primary.name)
            if member is None:
                member = members[primary.name] = self._member(cluster, primary)
            table.append(member)
        before = [m.address for m in self._primaries]
        self._members = members
        self._primaries = sorted(members.values(), key=lambda m: m.address)
        self._table = table
        after = [m.address for m in self._primaries]
        if before and before != after:
            logger.info(
                "Redis Cluster for rate limiting (CACHES[%r]): the primaries are now %s (were %s).",
                self.alias,
                ", ".join(after),
                ", ".join(before),
            )
        return table

    def _member(self, cluster: RedisCluster, node: ClusterNode) -> ClusterMember:
        if node.redis_connection is None:
            cluster.nodes_manager.create_redis_connections([node])  # type: ignore[no-untyped-call]
        member = self._members.get(node.name)
        if member is not None and member.pooled_client is node.redis_connection:
            return member
        return ClusterMember(self, node.name, node.redis_connection)

    def _moved(self, exc: MovedError) -> ClusterMember:
        self.refresh_soon()
        member = self._members.get(f"{exc.host}:{exc.port}")
        table = self._table
        if member is None or table is None:
            raise exc  # a node this process does not know yet: the refresh will
        table[exc.slot_id] = member
        return member

    def _refresh_loop(self) -> None:
        # Reads until one finds no decision failed since it began: while a
        # primary is down, decisions keep failing and this keeps reading, so
        # the promotion of its replica is seen within REFRESH_INTERVAL.
        try:
            while True:
                self._stale = False
                self._read_topology()
                with self._refresh_lock:
                    if not self._stale:
                        self._refresher = None
                        return
                time.sleep(REFRESH_INTERVAL)
        except BaseException:
            with self._refresh_lock:
                self._refresher = None  # the next failed decision starts another
            raise

    def _read_topology(self) -> None:
        try:
            cluster = self.cluster
            cluster.nodes_manager.initialize(**_KEEP_POOLS)
            self._rebuild(cluster)
        except (RedisError, RedisClusterException):
            pass  # no node answered; the next failed decision asks again
        except Exception:
            # Nothing a decision could do about it either: keep the table.
            logger.exception("reading the topology of CACHES[%r] failed", self.alias)


def _keep_pools() -> dict[str, Any]:
    """Return what makes ``NodesManager.initialize`` leave the pools' idle connections open.

    Those of the nodes that did not change are still good. redis-py 5.x has
    no such option (and closes none).
    """
    from redis.cluster import NodesManager

    option = "disconnect_startup_nodes_pools"
    known = inspect.signature(NodesManager.initialize).parameters
    return {option: False} if option in known else {}


_KEEP_POOLS = _keep_pools()


_live_clusters: weakref.WeakSet[ClusterBackend] = weakref.WeakSet()


def _cluster_after_fork() -> None:
    for backend in list(_live_clusters):
        backend.forget_connections()


after_fork_hooks.append(_cluster_after_fork)
