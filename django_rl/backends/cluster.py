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
failover serves decisions a moment after its promotion. Reads are at least
:data:`REFRESH_INTERVAL` apart, however many decisions fail. No decision
waits for a read but a process's first, which reads the slot table; if that
fails, decisions fail at once (``fail_open`` decides) until the background
reads succeed.

A slot on the move is followed, never counted as an outage (see
:meth:`ClusterBackend.run`): ``MOVED`` at once, to the node it names;
``ASK``, with ``ASKING``, on the node importing the slot, where the key now
is; ``TRYAGAIN`` (a command on keys the migration has split) a moment later.
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

from django_rl.backends.cluster_member import ClusterMember
from django_rl.backends.health import Health
from django_rl.backends.node import RedisNode, after_fork_hooks
from django_rl.exceptions import ConfigurationError

if TYPE_CHECKING:
    from redis.cluster import ClusterNode, RedisCluster

__all__ = ["REFRESH_INTERVAL", "ClusterBackend", "ClusterMember"]

P = ParamSpec("P")
T = TypeVar("T")

logger = logging.getLogger("django_rl")

#: Seconds between two reads of the topology, at least.
REFRESH_INTERVAL = 0.25
#: Redirects (``MOVED``, ``ASK``) and ``TRYAGAIN`` a decision follows before it gives up.
MAX_REDIRECTS = 5
#: Seconds before a command refused with ``TRYAGAIN`` is sent again.
TRYAGAIN_PAUSE = 0.02


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
        #: Nodes a redirect named that serve no slot yet (a primary being added).
        self._guests: dict[str, ClusterMember] = {}
        self._primaries: list[ClusterMember] = []
        self._load_lock = threading.Lock()
        self._guest_lock = threading.Lock()
        # The first read of the slot table failed: decisions fail at once
        # until the background reads succeed.
        self._unread = False
        self._refresh_lock = threading.Lock()
        self._refresher: threading.Thread | None = None
        self._stale = False
        #: When the last read of the topology began (``time.monotonic``).
        self._read_at = -REFRESH_INTERVAL
        #: Reads of the topology so far (for tests and logs).
        self.reads = 0
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

    def slot_of(self, key: str) -> int:
        return int(key_slot(key.encode()))

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
        """Run ``operation`` on the node that holds ``key``, following a slot on the move.

        * ``MOVED``: nothing ran; the slot has a new owner. The operation
          runs at once on the node named, and the whole table is read again
          in the background.
        * ``ASK``: nothing ran; the slot is migrating and its key is not on
          the source (moved already, or new). The operation runs on the node
          named, each of its commands (a transaction: the whole of it)
          preceded by ``ASKING``. The table does not change: the slot stays
          the source's until the migration ends.
        * ``TRYAGAIN``: a command on several keys, some of which have moved;
          sent again after :data:`TRYAGAIN_PAUSE`.

        At most :data:`MAX_REDIRECTS` of them in all: then the decision
        fails (kind ``migrating``, logged once per incident).
        """
        node = self.node_for(key)
        asking = False
        for _ in range(MAX_REDIRECTS):
            try:
                if asking:
                    return node.run_asking(key, operation, *args, **kwargs)
                return node.run(key, operation, *args, **kwargs)
            except MovedError as exc:
                failure: RedisError = exc
                node, asking = self._moved(exc), False
            except AskError as exc:
                failure = exc
                node, asking = self.member_at(exc.host, exc.port), True
            except TryAgainError as exc:
                failure = exc
                time.sleep(TRYAGAIN_PAUSE)
        node.health.answered_with_error(failure, "migrating")
        raise failure

    def member_at(self, host: str, port: int) -> ClusterMember:
        """Return the member for the node at ``host:port``, made now if none serves a slot yet.

        A redirect may name a node this process has not seen in the slot
        table: a primary just added to the cluster, importing its first slots.
        """
        address = f"{host}:{port}"
        member = self._members.get(address) or self._guests.get(address)
        if member is not None:
            return member
        from redis.cluster import ClusterNode

        with self._guest_lock:
            member = self._guests.get(address)
            if member is None:
                node = ClusterNode(host, port)  # type: ignore[no-untyped-call]
                self.cluster.nodes_manager.create_redis_connections([node])  # type: ignore[no-untyped-call]
                member = self._guests[address] = ClusterMember(self, address, node.redis_connection)
        return member

    def refresh_soon(self) -> None:
        """Read the topology again in the background, and again while decisions keep failing.

        Reads are at least :data:`REFRESH_INTERVAL` apart, and one thread
        makes them: however many decisions fail, the topology is read at most
        four times a second.
        """
        with self._refresh_lock:
            self._stale = True
            if self._refresher is not None:
                return
            self._refresher = threading.Thread(
                target=_refresh_loop,
                args=(weakref.ref(self),),
                name=f"django_rl cluster {self.alias}",
                daemon=True,
            )
            self._refresher.start()

    def forget_connections(self) -> None:
        """Forget what a forked child cannot use: locks and the refresher of its parent."""
        self._load_lock = threading.Lock()
        self._guest_lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        self._refresher = None

    def _load(self) -> list[ClusterMember | None]:
        """Read the slot table the first time; one thread does, the others wait for it.

        If that read fails, every decision after it fails at once, until a
        background read (every :data:`REFRESH_INTERVAL`, for as long as
        decisions come) succeeds: while the cluster is unreachable or hangs,
        a decision does not wait for one socket timeout per startup node.
        """
        with self._load_lock:
            table = self._table
            if table is not None:
                return table
            if self._unread:
                exc = RedisConnectionError(
                    "the Redis Cluster's topology could not be read yet; it is read again "
                    f"in the background every {REFRESH_INTERVAL:g} s"
                )
                self.health.failed(exc)
                self.refresh_soon()
                raise exc
            try:
                self._read_at = time.monotonic()
                self.reads += 1
                table = self._rebuild(self.cluster)
            except (RedisError, RedisClusterException) as exc:
                self._unread = True
                self.health.failed(exc)
                self.refresh_soon()
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
        guest = self._guests.pop(node.name, None)
        if guest is not None:
            return guest  # a node that redirects named before it served a slot
        if node.redis_connection is None:
            cluster.nodes_manager.create_redis_connections([node])  # type: ignore[no-untyped-call]
        member = self._members.get(node.name)
        if member is not None and member.pooled_client is node.redis_connection:
            return member
        return ClusterMember(self, node.name, node.redis_connection)

    def _moved(self, exc: MovedError) -> ClusterMember:
        self.refresh_soon()
        member = self.member_at(exc.host, exc.port)
        table = self._table
        if table is not None:
            table[exc.slot_id] = member
        return member

    def _read_topology(self) -> None:
        self._read_at = time.monotonic()
        self.reads += 1
        try:
            cluster = self._cluster
            if cluster is None:
                cluster = self.cluster  # making it reads the topology
            else:
                cluster.nodes_manager.initialize(**_KEEP_POOLS)
            self._rebuild(cluster)
        except (RedisError, RedisClusterException):
            return  # no node answered; the next failed decision asks again
        except Exception:
            # Nothing a decision could do about it either: keep the table.
            logger.exception("reading the topology of CACHES[%r] failed", self.alias)
            return
        if self._unread:
            self._unread = False
            self.health.succeeded()


def _refresh_loop(backend_ref: weakref.ref[ClusterBackend]) -> None:
    """Read the topology until a read finds no decision failed since the one before.

    While a primary is down, decisions keep failing and this keeps reading,
    so the promotion of its replica is seen within :data:`REFRESH_INTERVAL`.
    Holds the backend weakly: a backend the settings dropped is not kept
    alive by its refresher.
    """
    while True:
        backend = backend_ref()
        if backend is None:
            return
        try:
            wait = backend._read_at + REFRESH_INTERVAL - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            with backend._refresh_lock:
                backend._stale = False
            backend._read_topology()
        except BaseException:
            with backend._refresh_lock:
                backend._refresher = None  # the next failed decision starts another
            raise
        del backend
        # Failures meanwhile ask for another read; without any, the thread ends.
        time.sleep(REFRESH_INTERVAL)
        backend = backend_ref()
        if backend is None:
            return
        with backend._refresh_lock:
            if not backend._stale:
                backend._refresher = None
                return
        del backend


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
