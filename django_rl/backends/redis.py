"""One Redis server through a django-redis connection; the backend of each ``CACHES`` alias."""

from __future__ import annotations

import threading
from typing import Any

from django.conf import settings as django_settings
from django.utils.module_loading import import_string
from redis import Redis

from django_rl.backends.base import Backend
from django_rl.backends.node import RedisNode
from django_rl.conf import forget_on_change
from django_rl.exceptions import ConfigurationError

#: The django-redis client class that makes an alias a Redis Cluster.
CLUSTER_CLIENT = "django_rl.redis_cluster.RedisClusterClient"


class RedisBackend(RedisNode):
    """The Redis server behind one ``CACHES`` alias: a single server, or Sentinel's primary.

    The alias' one node: every key is on it. Its client comes from the
    django-redis cache (for Sentinel, a pool whose connections ask the
    sentinels where the primary is).
    """

    def slot_of(self, key: str) -> int:
        return 0

    def node_for(self, key: str) -> RedisNode:
        return self

    def nodes(self) -> list[RedisNode]:
        return [self]

    def _connect(self) -> Redis:
        from django_redis import get_redis_connection
        from redis.cluster import RedisCluster

        try:
            client: Redis = get_redis_connection(self.alias, write=True)
        except NotImplementedError as exc:
            raise ConfigurationError(
                f"CACHES[{self.alias!r}] is not a django-redis cache",
                check_id="django_rl.E004",
                hint="Set its BACKEND to 'django_redis.cache.RedisCache'",
            ) from exc
        if isinstance(client, RedisCluster):
            raise ConfigurationError(
                f"CACHES[{self.alias!r}] connects to a Redis Cluster through a client "
                "class django_rl does not know",
                check_id="django_rl.E060",
                hint=f"Set its OPTIONS['CLIENT_CLASS'] to {CLUSTER_CLIENT!r}",
            )
        return client


_backends: dict[str, Backend] = {}
_backends_lock = threading.Lock()


def get_backend(alias: str) -> Backend:
    """Return the shared backend of a ``CACHES`` alias.

    A :class:`~django_rl.backends.cluster.ClusterBackend` when the alias'
    client class is django_rl's Redis Cluster client (or a subclass), else a
    :class:`RedisBackend`. Nothing connects here.
    """
    try:
        return _backends[alias]
    except KeyError:
        with _backends_lock:
            backend = _backends.get(alias)
            if backend is None:
                backend = _backends[alias] = _make_backend(alias)
            return backend


def is_cluster_alias(config: Any) -> bool:
    """Return whether a ``CACHES`` entry uses django_rl's Redis Cluster client."""
    from django_rl.redis_cluster import RedisClusterClient

    options = config.get("OPTIONS", {}) if isinstance(config, dict) else {}
    path = options.get("CLIENT_CLASS") if isinstance(options, dict) else None
    if not isinstance(path, str):
        return False
    try:
        client_class = import_string(path)
    except ImportError:
        return False
    return isinstance(client_class, type) and issubclass(client_class, RedisClusterClient)


def _make_backend(alias: str) -> Backend:
    if is_cluster_alias(getattr(django_settings, "CACHES", {}).get(alias)):
        from django_rl.backends.cluster import ClusterBackend

        return ClusterBackend(alias)
    return RedisBackend(alias)


forget_on_change(_backends.clear, "CACHES")
