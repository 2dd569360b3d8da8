"""A django-redis client class for Redis Cluster, for the Django cache and django_rl alike.

django-redis has clients for one server, for Sentinel and for client-side
sharding, but none for Redis Cluster. One setting makes an alias a cluster::

    CACHES = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": "redis://10.0.0.1:7000,redis://10.0.0.2:7000",
            "OPTIONS": {
                "CLIENT_CLASS": "django_rl.redis_cluster.RedisClusterClient",
                "SOCKET_CONNECT_TIMEOUT": 0.1,
                "SOCKET_TIMEOUT": 0.1,
            },
        }
    }

Every URL of ``LOCATION`` is a startup node (one is enough; more let the
process start while one is down); the first one's query string and
``OPTIONS`` (timeouts, ``PASSWORD``, ``CONNECTION_POOL_KWARGS``) apply to the
connections to every node. ``REDIS_CLIENT_KWARGS`` go to redis-py's
``RedisCluster`` (``retry``, ``require_full_coverage``, ``address_remap``...).
The client is built on redis-py's ``RedisCluster``, one per ``LOCATION`` for
the whole process (as django-redis keeps one pool per URL), shared by the
Django cache and django_rl. Cache calls go through ``RedisCluster``, which
routes each key to its node; ``get_many`` uses ``MGET`` per slot
(``mget_nonatomic``), since keys of one call may live on several nodes.
django_rl's decisions use the same node pools but not ``RedisCluster``'s
command path (see ``django_rl.backends.cluster``).
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from typing import Any, ClassVar

from django.core.cache.backends.base import BaseCache
from django.core.exceptions import ImproperlyConfigured
from django_redis.client import DefaultClient
from django_redis.exceptions import ConnectionInterrupted
from django_redis.pool import ConnectionFactory
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import parse_url
from redis.exceptions import RedisError

#: The connection factory of :class:`RedisClusterClient`, as django-redis names factories.
FACTORY = "django_rl.redis_cluster.RedisClusterConnectionFactory"


class RedisClusterConnectionFactory(ConnectionFactory):  # type: ignore[misc]
    """Make one ``RedisCluster`` per ``LOCATION`` for the process, and hand it out.

    ``connect`` takes the comma-separated URLs of the startup nodes.
    """

    _clusters: ClassVar[dict[str, RedisCluster]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def connect(self, url: str) -> RedisCluster:
        cluster = self._clusters.get(url)
        if cluster is None:
            with self._lock:
                cluster = self._clusters.get(url)
                if cluster is None:
                    # Reads the topology from the first startup node that
                    # answers; raises RedisClusterException if none does,
                    # and the next call tries again.
                    cluster = self._clusters[url] = self.make_cluster(url)
        return cluster

    def make_cluster(self, url: str) -> RedisCluster:
        """Return a new ``RedisCluster`` for the comma-separated startup node URLs ``url``."""
        first, *others = (part.strip() for part in url.split(",") if part.strip())
        params = self.make_connection_params(first)
        params.pop("url")
        params.pop("parser_class", None)  # RedisCluster does not pass it on to the nodes
        startup_nodes = []
        for other in others:
            parsed = parse_url(other)  # type: ignore[no-untyped-call]
            node = ClusterNode(parsed.get("host"), parsed.get("port", 6379))  # type: ignore[no-untyped-call]
            startup_nodes.append(node)
        return RedisCluster(
            url=first,
            startup_nodes=startup_nodes,
            **{**params, **self.pool_cls_kwargs, **self.redis_client_cls_kwargs},
        )

    def disconnect(self, connection: Any) -> None:
        connection.disconnect_connection_pools()


class RedisClusterClient(DefaultClient):  # type: ignore[misc]
    """A django-redis client for Redis Cluster (``OPTIONS["CLIENT_CLASS"]``).

    Its connection factory is :class:`RedisClusterConnectionFactory` whatever
    ``DJANGO_REDIS_CONNECTION_FACTORY`` says for other aliases (an
    ``OPTIONS["CONNECTION_FACTORY"]`` that subclasses it is kept).
    """

    _server: list[str]
    connection_factory: Any

    def __init__(self, server: Any, params: dict[str, Any], backend: BaseCache) -> None:
        # Before DefaultClient makes its factory: DJANGO_REDIS_CONNECTION_FACTORY
        # may name another kind (Sentinel's would even refuse these options).
        options = dict(params.get("OPTIONS", {}))
        options["CONNECTION_FACTORY"] = options.get("CONNECTION_FACTORY") or FACTORY
        super().__init__(server, {**params, "OPTIONS": options}, backend)
        if not isinstance(self.connection_factory, RedisClusterConnectionFactory):
            raise ImproperlyConfigured(
                "OPTIONS['CONNECTION_FACTORY'] of a RedisClusterClient must subclass "
                f"{FACTORY} (django_rl.E060)"
            )
        # One "server": the startup nodes together. DefaultClient would take
        # the second and later URLs for read replicas.
        self._server = [",".join(self._server)]
        self._clients = [None]

    def get_next_client_index(self, write: bool = True, tried: list[int] | None = None) -> int:
        return 0

    def get_many(
        self, keys: Collection[str], version: int | None = None, client: Any = None
    ) -> dict[str, Any]:
        """Retrieve many keys, one ``MGET`` per slot (the keys may live on several nodes)."""
        if client is None:
            client = self.get_client(write=False)
        if not keys:
            return {}
        names = {self.make_key(k, version=version): k for k in keys}
        try:
            values = client.mget_nonatomic(list(names))
        except RedisError as exc:
            raise ConnectionInterrupted(connection=client) from exc
        return {
            names[key]: self.decode(value)
            for key, value in zip(names, values, strict=True)
            if value is not None
        }

    def keys(self, search: str, version: int | None = None, client: Any = None) -> list[Any]:
        """Run ``KEYS`` on every primary (redis-py sends it to one node only)."""
        if client is None:
            client = self.get_client(write=False)
        pattern = self.make_pattern(search, version=version)
        try:
            found = client.keys(pattern, target_nodes=RedisCluster.PRIMARIES)
        except RedisError as exc:
            raise ConnectionInterrupted(connection=client) from exc
        return [self.reverse_key(k.decode() if isinstance(k, bytes) else k) for k in found]
