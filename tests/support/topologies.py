"""Redis topologies on loopback for the tests: one server, a Redis Cluster, Sentinel.

Each is built from the ``redis-server`` binary on free ports and stopped by
pid (see ``tests.support.redis_server``). A topology object gives what the tests need
whatever its shape: a ``CACHES`` setting for Django, a client that sees the
whole keyspace, a client per primary, and a way to empty it.

* :class:`ClusterTopology`: 3 primaries and 3 replicas, ``cluster-node-timeout``
  1 s, created with ``redis-cli --cluster create ... --cluster-yes``.
* :class:`SentinelTopology`: a primary, a replica and 3 sentinels (quorum 2,
  ``down-after-milliseconds`` 1000).

Nothing in them assumes which server is a primary: a test may fail one over,
and later tests find the primaries again.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any, Protocol

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry

from tests.support import servers
from tests.support.redis_server import RedisServer, caches_for, free_port, reap, spawn


def with_tls(options: dict[str, Any]) -> dict[str, Any]:
    """Return cache OPTIONS that verify the server's certificate against the suite's CA."""
    tls = {"ssl_ca_certs": servers.certificates().ca, "ssl_cert_reqs": "required"}
    return {
        **options,
        "CONNECTION_POOL_KWARGS": {**tls, **options.get("CONNECTION_POOL_KWARGS", {})},
    }


#: The cluster's and the sentinels' failure detection time, in ms.
NODE_TIMEOUT_MS = 1000
#: A primary starts a replica's full sync at once (Redis waits 5 s by default,
#: for more replicas to share a diskless transfer).
FAST_SYNC = ["--repl-diskless-sync-delay", "0"]
SENTINEL_SERVICE = "django_rl"
_pool_names = itertools.count()


def free_port_with_bus() -> int:
    """Return a free port whose port + 10000 (a cluster bus before Redis 7.0) is free too."""
    for _ in range(100):
        port = free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port with a free cluster bus port")


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` every 20 ms until it holds; fail with ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except redis.RedisError:
            pass
        time.sleep(0.02)
    raise RuntimeError(f"timed out after {timeout} s waiting for {what}")


def pool_name() -> str:
    """Return a client name unique in this process: django-redis keeps one pool per URL."""
    return f"django_rl_{next(_pool_names)}"


class Topology(Protocol):
    name: str

    def caches(self, timeout: float = 1, **options: Any) -> dict[str, dict[str, Any]]:
        """Return a CACHES setting for it, with a pool of its own and these socket timeouts."""
        ...

    def client(self) -> Any:
        """Return a client that sees the whole keyspace (routes each key to its server)."""
        ...

    def primaries(self) -> list[redis.Redis]:
        """Return a client of each server that holds keys."""
        ...

    def flush(self) -> None:
        """Delete every key."""
        ...


def _plain(port: int) -> redis.Redis:
    return redis.Redis(port=port, socket_timeout=5, retry=Retry(NoBackoff(), 0))


class SingleTopology:
    """The suite's own single redis-server."""

    name = "single"

    def __init__(self, server: RedisServer) -> None:
        self.server = server
        self._client = server.client()

    def caches(self, timeout: float = 1, **options: Any) -> dict[str, dict[str, Any]]:
        url = f"{self.server.django_rl_url()}?client_name={pool_name()}"
        if self.server.tls:
            options = with_tls(options)
        return caches_for(url, SOCKET_CONNECT_TIMEOUT=timeout, SOCKET_TIMEOUT=timeout, **options)

    def client(self) -> redis.Redis:
        return self._client

    def primaries(self) -> list[redis.Redis]:
        return [self._client]

    def flush(self) -> None:
        self._client.flushall()


class ClusterTopology:
    """A Redis Cluster of ``shards`` primaries, each with one replica."""

    name = "cluster"

    def __init__(self, shards: int = 3) -> None:
        self.shards = shards
        self.servers: list[RedisServer] = []
        self._client: RedisCluster | None = None

    def start(self) -> None:
        for _ in range(self.shards * 2):
            server = RedisServer()
            self.servers.append(server)
            args = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                str(NODE_TIMEOUT_MS),
                *FAST_SYNC,
            ]
            if servers.SERVER == "redis-6.2":
                # No cluster-port option before 7.0: the bus is on port + 10000.
                server.start(port=free_port_with_bus(), extra_args=args)
            else:
                # The default bus port, port + 10000, may be taken or out of range.
                server.start(extra_args=[*args, "--cluster-port", str(free_port())])
        command = ["redis-cli", "--cluster", "create"]
        command += [f"127.0.0.1:{server.port}" for server in self.servers]
        command += ["--cluster-replicas", "1", "--cluster-yes"]
        created = subprocess.run(command, capture_output=True, text=True, timeout=60)
        if created.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout}")
        self.wait_healthy()

    @property
    def seeds(self) -> list[str]:
        """Return the startup node URLs django_rl is given: every server's."""
        return [server.django_rl_url().removesuffix("/0") for server in self.servers]

    def caches(self, timeout: float = 1, **options: Any) -> dict[str, dict[str, Any]]:
        seeds = self.seeds
        location = ",".join([f"{seeds[0]}?client_name={pool_name()}", *seeds[1:]])
        options = {"CLIENT_CLASS": "django_rl.redis_cluster.RedisClusterClient", **options}
        return caches_for(
            location, SOCKET_CONNECT_TIMEOUT=timeout, SOCKET_TIMEOUT=timeout, **options
        )

    def client(self) -> RedisCluster:
        if self._client is None:
            self._client = RedisCluster(
                startup_nodes=[ClusterNode("127.0.0.1", s.port) for s in self.servers],
                socket_timeout=5,
                retry=Retry(NoBackoff(), 3),
            )
        return self._client

    def refresh(self) -> None:
        """Make :meth:`client` read the topology again (after a failover or a reshard)."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def live(self) -> list[RedisServer]:
        return [server for server in self.servers if server.process is not None]

    def nodes(self) -> list[dict[str, Any]]:
        """Return ``CLUSTER NODES`` as a live server sees it: ``{"port", "id", "primary", ...}``."""
        client = _plain(self.live()[0].port)
        try:
            parsed = client.cluster("nodes")  # redis-py: {"ip:port": {...}}
        finally:
            client.close()
        nodes = []
        for address, node in parsed.items():
            flags = node["flags"].split(",")
            nodes.append(
                {
                    "id": node["node_id"],
                    "port": int(address.rsplit(":", 1)[1]),
                    "primary": "master" in flags,
                    "failed": "fail" in flags or "fail?" in flags,
                    "replica_of": node["master_id"] if node["master_id"] != "-" else None,
                    "slots": [(int(r[0]), int(r[-1])) for r in node["slots"]],
                }
            )
        return nodes

    def primary_servers(self) -> list[RedisServer]:
        """Return the servers that are primaries and serve slots, by port."""
        ports = {n["port"] for n in self.nodes() if n["primary"] and n["slots"]}
        return sorted((s for s in self.servers if s.port in ports), key=lambda s: s.port)

    def primaries(self) -> list[redis.Redis]:
        return [_plain(server.port) for server in self.primary_servers()]

    def server_of(self, key: str) -> RedisServer:
        """Return the primary that serves ``key`` now."""
        return self.server_of_slot(int(self.client().keyslot(key)))

    def server_of_slot(self, slot: int) -> RedisServer:
        """Return the primary that serves ``slot`` now, as a live node sees it."""
        for node in self.nodes():
            if node["primary"] and any(low <= slot <= high for low, high in node["slots"]):
                return next(s for s in self.servers if s.port == node["port"])
        raise RuntimeError(f"no primary serves slot {slot}")

    def replica_of(self, primary: RedisServer) -> RedisServer:
        nodes = self.nodes()
        primary_id = next(n["id"] for n in nodes if n["port"] == primary.port)
        port = next(n["port"] for n in nodes if n["replica_of"] == primary_id)
        return next(s for s in self.servers if s.port == port)

    def flush(self) -> None:
        for client in self.primaries():
            client.flushall()
            client.close()

    def wait_healthy(self, timeout: float = 30) -> None:
        """Wait until the cluster is whole and every node sees the same slot owners.

        Whole: every node up and saying the cluster is ok, each primary with a
        replica in sync. The same owners: a client reads the slot table from
        any startup node, replicas included, and a view that lags (gossip,
        after a failover or a moved slot) would cost it a redirect.
        """

        def healthy() -> bool:
            views = set()
            for server in self.servers:
                client = _plain(server.port)
                try:
                    if client.cluster("info")["cluster_state"] != "ok":
                        return False
                    replication = client.info("replication")
                    if replication["role"] == "slave" and (
                        replication.get("master_link_status") != "up"
                    ):
                        return False
                    slots = client.execute_command("CLUSTER SLOTS")
                    views.add(
                        tuple(sorted((low, high, primary[1]) for low, high, primary, *_ in slots))
                    )
                finally:
                    client.close()
            if len(views) != 1:
                return False
            nodes = self.nodes()
            primaries = [n for n in nodes if n["primary"] and n["slots"]]
            return (
                len(nodes) == len(self.servers)
                and len(primaries) == self.shards
                and not any(n["failed"] for n in nodes)
                and all(any(r["replica_of"] == p["id"] for r in nodes) for p in primaries)
            )

        wait_for(healthy, timeout, "the cluster to be healthy")
        self.refresh()

    def restart(self, server: RedisServer) -> None:
        """Start a killed node again on its port and wait until the cluster is whole."""
        server.start(port=server.port, extra_args=server.extra_args)
        self.wait_healthy()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        for server in self.servers:
            if server.process is not None:
                server.process.terminate()  # all at once; close() then reaps each
        for server in self.servers:
            server.close()


class Sentinel:
    """One ``redis-server --sentinel`` process on a free port."""

    def __init__(self, primary_port: int) -> None:
        self.directory = tempfile.mkdtemp(prefix="django-rl-sentinel-")
        self.port = free_port()
        config = os.path.join(self.directory, "sentinel.conf")
        with open(config, "w") as conf:
            conf.write(
                f"port {self.port}\n"
                "bind 127.0.0.1\n"
                f"dir {self.directory}\n"
                f"logfile {os.path.join(self.directory, 'sentinel.log')}\n"
                f"sentinel monitor {SENTINEL_SERVICE} 127.0.0.1 {primary_port} 2\n"
                f"sentinel down-after-milliseconds {SENTINEL_SERVICE} {NODE_TIMEOUT_MS}\n"
                f"sentinel failover-timeout {SENTINEL_SERVICE} 10000\n"
                f"sentinel parallel-syncs {SENTINEL_SERVICE} 1\n"
            )
        self.config = config
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        """Start it (again: a sentinel keeps what it learnt in its config file)."""
        self.process = spawn([*servers.server_command(), self.config, "--sentinel"])
        wait_for(lambda: bool(self.client().ping()), 10, "a sentinel to answer")

    def client(self) -> redis.Redis:
        return _plain(self.port)

    def stop(self) -> None:
        if self.process is not None:
            reap(self.process)
            self.process = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


class SentinelTopology:
    """A primary, its replica, and 3 sentinels that fail it over (quorum 2)."""

    name = "sentinel"

    def __init__(self) -> None:
        self.servers = [RedisServer(), RedisServer()]
        self.sentinels: list[Sentinel] = []

    def start(self) -> None:
        primary, replica = self.servers
        primary.start(extra_args=FAST_SYNC)
        replica.start(extra_args=[*FAST_SYNC, "--replicaof", "127.0.0.1", str(primary.port)])
        replica.wait_until_synced()
        # After the replica: a sentinel learns of replicas from the primary's
        # INFO, which it reads at once, then only every 10 s.
        self.sentinels = [Sentinel(primary.port) for _ in range(3)]
        self.wait_healthy()

    def sentinel_addresses(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", sentinel.port) for sentinel in self.sentinels]

    def caches(self, timeout: float = 1, **options: Any) -> dict[str, dict[str, Any]]:
        """Return CACHES as docs/scaling.md advises: sentinel queries time out and never retry."""
        # The service name stands where the host would.
        credentials = f"{servers.ACL_USER}:{servers.ACL_PASSWORD}@" if servers.ACL_MODE else ""
        location = f"redis://{credentials}{SENTINEL_SERVICE}/0?client_name={pool_name()}"
        options = {
            "CLIENT_CLASS": "django_redis.client.SentinelClient",
            "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
            "SENTINELS": self.sentinel_addresses(),
            "SENTINEL_KWARGS": {
                "socket_connect_timeout": timeout,
                "socket_timeout": timeout,
                "retry": Retry(NoBackoff(), 0),
            },
            **options,
        }
        return caches_for(
            location, SOCKET_CONNECT_TIMEOUT=timeout, SOCKET_TIMEOUT=timeout, **options
        )

    def primary_port(self) -> int:
        """Return the primary's port, as the first sentinel that answers sees it."""
        for sentinel in self.sentinels:
            if sentinel.process is None:
                continue
            client = sentinel.client()
            try:
                _, port = client.sentinel_get_master_addr_by_name(SENTINEL_SERVICE)
                return int(port)
            except redis.RedisError:
                continue
            finally:
                client.close()
        raise RuntimeError("no sentinel answers")

    def primary(self) -> RedisServer:
        port = self.primary_port()
        return next(server for server in self.servers if server.port == port)

    def replica(self) -> RedisServer:
        port = self.primary_port()
        return next(server for server in self.servers if server.port != port)

    def client(self) -> redis.Redis:
        return _plain(self.primary_port())

    def primaries(self) -> list[redis.Redis]:
        return [self.client()]

    def flush(self) -> None:
        client = self.client()
        try:
            client.flushall()
        finally:
            client.close()

    def wait_healthy(self, timeout: float = 30) -> None:
        """Wait until every sentinel knows the primary, its replica and the other sentinels."""

        def healthy() -> bool:
            port = self.primary_port()
            for sentinel in self.sentinels:
                client = sentinel.client()
                try:
                    state = client.sentinel_master(SENTINEL_SERVICE)
                    replicas = client.sentinel_slaves(SENTINEL_SERVICE)
                finally:
                    client.close()
                if int(state["port"]) != port or state["num-other-sentinels"] != 2:
                    return False
                if [r for r in replicas if not (r["is_sdown"] or r["is_odown"])] == []:
                    return False
                if not state["is_master"] or state["is_sdown"]:
                    return False
            replica = _plain(self.replica().port)
            try:
                return replica.info("replication").get("master_link_status") == "up"
            finally:
                replica.close()

        wait_for(healthy, timeout, "the sentinels to agree on a primary with a replica")

    def restart_as_replica(self, server: RedisServer) -> None:
        """Start a killed old primary again, as the replica of the new one, and wait."""
        args = [*FAST_SYNC, "--replicaof", "127.0.0.1", str(self.primary_port())]
        server.start(port=server.port, extra_args=args)
        self.wait_healthy()

    def close(self) -> None:
        for sentinel in self.sentinels:
            sentinel.close()
        for server in self.servers:
            server.close()
