"""Checks of the rate limiter's connection when Redis is a cluster or Sentinel-managed.

=============== ==========================================================
id              problem
=============== ==========================================================
django_rl.E060  the alias connects to a Redis Cluster through redis-py's
                ``RedisCluster`` but not through django_rl's client class
                (django_rl's backend would get a client it cannot use), or
                ``RedisClusterClient`` is given a connection factory that
                does not make clusters
django_rl.E061  a Redis Cluster alias names a database other than 0 (a
                cluster has only database 0)
django_rl.W060  the alias asks Sentinel where the primary is through
                connections that retry (redis-py's ``Redis`` default): while
                a sentinel is down, a decision that opens a connection can
                wait seconds, not one socket timeout
django_rl.W061  ``SENTINEL_KWARGS`` sets no socket timeout: a hung sentinel
                hangs every decision that opens a connection
=============== ==========================================================

Like the other connection checks, these read the settings and connect to
nothing.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from django.conf import settings as django_settings
from django.utils.module_loading import import_string

from django_rl.checks.connection_checks import retry_count
from django_rl.checks.validation import Problem
from django_rl.docs_urls import doc_url

_SEE = f"See {doc_url('scaling')}."
CLUSTER_CLIENT = "django_rl.redis_cluster.RedisClusterClient"
#: SENTINEL_KWARGS that keep a sentinel query to one socket timeout.
SENTINEL_KWARGS_HINT = (
    "'SENTINEL_KWARGS': {'socket_connect_timeout': 0.1, 'socket_timeout': 0.1, "
    "'retry': Retry(NoBackoff(), 0)} (from redis.retry and redis.backoff)"
)


def topology_problems(alias: str, config: Mapping[str, Any]) -> list[Problem]:
    """Return the E06x and W06x problems of ``CACHES[alias]``, a django-redis cache."""
    options = config.get("OPTIONS", {})
    if not isinstance(options, Mapping):
        return []
    client_class = _imported(options.get("CLIENT_CLASS"))
    from django_rl.redis_cluster import RedisClusterClient, RedisClusterConnectionFactory

    if _is_subclass(client_class, RedisClusterClient):
        return _cluster_problems(alias, config, options, RedisClusterConnectionFactory)
    redis_client_class = _imported(options.get("REDIS_CLIENT_CLASS"))
    from redis.cluster import RedisCluster

    if _is_subclass(redis_client_class, RedisCluster):
        return [
            Problem(
                "django_rl.E060",
                f"CACHES[{alias!r}] connects to a Redis Cluster through its REDIS_CLIENT_CLASS, "
                "with a client class django_rl cannot use",
                f"Set OPTIONS['CLIENT_CLASS'] to {CLUSTER_CLIENT!r} and remove "
                f"REDIS_CLIENT_CLASS. {_SEE}",
            )
        ]
    if _uses_sentinel(options, client_class):
        return _sentinel_problems(alias, options)
    return []


def _cluster_problems(
    alias: str, config: Mapping[str, Any], options: Mapping[str, Any], factory_class: type
) -> list[Problem]:
    problems = []
    factory = options.get("CONNECTION_FACTORY")
    if factory and not _is_subclass(_imported(factory), factory_class):
        problems.append(
            Problem(
                "django_rl.E060",
                f"CACHES[{alias!r}] uses RedisClusterClient with the CONNECTION_FACTORY "
                f"{factory!r}, which does not make Redis Cluster clients",
                f"Remove OPTIONS['CONNECTION_FACTORY']. {_SEE}",
            )
        )
    from redis.connection import parse_url

    location = config.get("LOCATION", "")
    urls = location if isinstance(location, (list, tuple)) else str(location).split(",")
    for url in (str(u).strip() for u in urls):
        try:
            db = parse_url(url).get("db", 0)  # type: ignore[no-untyped-call]
        except (ValueError, TypeError):
            continue  # a URL redis-py cannot parse fails loudly on first use
        if db:
            problems.append(
                Problem(
                    "django_rl.E061",
                    f"CACHES[{alias!r}] is a Redis Cluster but its LOCATION {url!r} "
                    f"names database {db}",
                    f"A cluster has only database 0: end the URL with /0 or no path. {_SEE}",
                )
            )
    return problems


def _uses_sentinel(options: Mapping[str, Any], client_class: object) -> bool:
    from django_redis.client import SentinelClient
    from django_redis.pool import SentinelConnectionFactory

    factory = options.get("CONNECTION_FACTORY") or getattr(
        django_settings, "DJANGO_REDIS_CONNECTION_FACTORY", None
    )
    return _is_subclass(client_class, SentinelClient) or _is_subclass(
        _imported(factory), SentinelConnectionFactory
    )


def _sentinel_problems(alias: str, options: Mapping[str, Any]) -> list[Problem]:
    sentinel_kwargs = options.get("SENTINEL_KWARGS")
    problems = []
    if sentinel_kwargs is None:
        retries = _default_retries()
    elif isinstance(sentinel_kwargs, Mapping):
        retries = retry_count(sentinel_kwargs) if "retry" in sentinel_kwargs else _default_retries()
        if not sentinel_kwargs.get("socket_timeout"):
            problems.append(
                Problem(
                    "django_rl.W061",
                    f"CACHES[{alias!r}] sets SENTINEL_KWARGS without a socket timeout: while a "
                    "sentinel hangs, every decision that opens a connection waits for it",
                    f"Use {SENTINEL_KWARGS_HINT}. {_SEE}",
                )
            )
    else:
        return []
    if retries:
        times = "forever" if retries < 0 else "once" if retries == 1 else f"{retries} times"
        problems.insert(
            0,
            Problem(
                "django_rl.W060",
                f"CACHES[{alias!r}] asks Sentinel for the primary through connections that retry "
                f"{times}, with back-off: while a sentinel is down, a decision that opens a "
                "connection can wait seconds",
                f"Add {SENTINEL_KWARGS_HINT} to its OPTIONS. {_SEE}",
            ),
        )
    return problems


def _default_retries() -> int:
    """Return how often the installed redis-py's ``Redis()`` retries a call by default."""
    from redis import Redis

    default = inspect.signature(Redis.__init__).parameters["retry"].default
    return retry_count({"retry": default}) if default is not None else 0


def _imported(path: object) -> object:
    if isinstance(path, type):
        return path
    if not isinstance(path, str):
        return None
    try:
        return import_string(path)
    except ImportError:
        return None


def _is_subclass(candidate: object, parent: type) -> bool:
    return isinstance(candidate, type) and issubclass(candidate, parent)
