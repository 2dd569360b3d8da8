"""Checks of a Redis Cluster or Sentinel connection (django_rl.E060, E061, W060, W061)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from django.core.checks import Error, Warning
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry

from django_rl.checks.system import check_settings
from django_rl.checks.topology_checks import SENTINEL_KWARGS_HINT, _default_retries
from django_rl.docs_urls import doc_url

SEE = f"See {doc_url('scaling')}."
TIMEOUTS = {"SOCKET_CONNECT_TIMEOUT": 0.1, "SOCKET_TIMEOUT": 0.1}
CLUSTER = "django_rl.redis_cluster.RedisClusterClient"
SENTINEL = {
    "CLIENT_CLASS": "django_redis.client.SentinelClient",
    "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
    "SENTINELS": [("127.0.0.1", 26379)],
}
GOOD_SENTINEL_KWARGS = {
    "socket_connect_timeout": 0.1,
    "socket_timeout": 0.1,
    "retry": Retry(NoBackoff(), 0),
}


def found(settings, location, **options):
    settings.ROOT_URLCONF = "tests.sites.urls_without_limits"
    settings.CACHES = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": location,
            "OPTIONS": {**TIMEOUTS, **options},
        }
    }
    settings.DJANGO_RL = {"POLICIES": {}}
    return check_settings()


def test_a_cluster_through_django_rls_client_is_clean(settings):
    assert (
        found(settings, "redis://10.0.0.1:7000,redis://10.0.0.2:7000", CLIENT_CLASS=CLUSTER) == []
    )


def test_retries_of_a_cluster_alias_do_not_reach_decisions(settings):
    # They go to RedisCluster's own calls (the Django cache's); node
    # connections, which decisions use, never retry.
    retry = {"retry": Retry(ExponentialBackoff(), 3)}
    assert (
        found(settings, "redis://h:7000", CLIENT_CLASS=CLUSTER, CONNECTION_POOL_KWARGS=retry) == []
    )


def test_a_cluster_client_of_another_kind_is_an_error(settings):
    assert found(settings, "redis://h:7000", REDIS_CLIENT_CLASS="redis.cluster.RedisCluster") == [
        Error(
            "CACHES['default'] connects to a Redis Cluster through its REDIS_CLIENT_CLASS, with "
            "a client class django_rl cannot use",
            hint=f"Set OPTIONS['CLIENT_CLASS'] to {CLUSTER!r} and remove REDIS_CLIENT_CLASS. {SEE}",
            id="django_rl.E060",
        )
    ]


def test_a_cluster_client_with_a_foreign_connection_factory_is_an_error(settings):
    factory = "django_redis.pool.ConnectionFactory"
    assert found(settings, "redis://h:7000", CLIENT_CLASS=CLUSTER, CONNECTION_FACTORY=factory) == [
        Error(
            "CACHES['default'] uses RedisClusterClient with the CONNECTION_FACTORY "
            f"{factory!r}, which does not make Redis Cluster clients",
            hint=f"Remove OPTIONS['CONNECTION_FACTORY']. {SEE}",
            id="django_rl.E060",
        )
    ]


def test_a_cluster_has_only_database_0(settings):
    assert found(settings, "redis://h:7000/0,redis://h:7001/2", CLIENT_CLASS=CLUSTER) == [
        Error(
            "CACHES['default'] is a Redis Cluster but its LOCATION 'redis://h:7001/2' names "
            "database 2",
            hint=f"A cluster has only database 0: end the URL with /0 or no path. {SEE}",
            id="django_rl.E061",
        )
    ]


def w060(times: str) -> Warning:
    return Warning(
        f"CACHES['default'] asks Sentinel for the primary through connections that retry "
        f"{times}, with back-off: while a sentinel is down, a decision that opens a connection "
        "can wait seconds",
        hint=f"Add {SENTINEL_KWARGS_HINT} to its OPTIONS. {SEE}",
        id="django_rl.W060",
    )


#: What redis-py's Redis() does when not told (8.x: 10 retries; 5.x: none).
DEFAULT = [w060(f"{_default_retries()} times")] if _default_retries() else []

W061 = Warning(
    "CACHES['default'] sets SENTINEL_KWARGS without a socket timeout: while a sentinel hangs, "
    "every decision that opens a connection waits for it",
    hint=f"Use {SENTINEL_KWARGS_HINT}. {SEE}",
    id="django_rl.W061",
)


@pytest.mark.parametrize(
    ("sentinel_kwargs", "expected"),
    [
        (GOOD_SENTINEL_KWARGS, []),
        # redis-py's Redis() retries 10 times by default (8.x): the sentinel
        # connections django-redis makes do, unless told otherwise.
        (None, DEFAULT),
        ({"socket_timeout": 0.1}, DEFAULT),
        ({**GOOD_SENTINEL_KWARGS, "retry": Retry(NoBackoff(), 2)}, [w060("2 times")]),
        ({"retry": Retry(NoBackoff(), 0)}, [W061]),
    ],
)
def test_sentinel_connections_must_time_out_and_not_retry(settings, sentinel_kwargs, expected):
    assert _default_retries() == 10 or not redis.__version__.startswith("8.")
    options = dict(SENTINEL)
    if sentinel_kwargs is not None:
        options["SENTINEL_KWARGS"] = sentinel_kwargs
    assert found(settings, "redis://mymaster/0", **options) == expected


def test_a_sentinel_factory_set_for_every_alias_counts(settings):
    settings.DJANGO_REDIS_CONNECTION_FACTORY = "django_redis.pool.SentinelConnectionFactory"
    options = {"CLIENT_CLASS": "django_redis.client.SentinelClient", "SENTINELS": []}
    assert found(settings, "redis://mymaster/0", **options) == DEFAULT


@pytest.mark.parametrize("block", [0, 1], ids=["cluster", "sentinel"])
def test_the_settings_of_docs_scaling_are_clean(settings, block):
    text = (Path(__file__).parent.parent.parent / "docs" / "scaling.md").read_text()
    marked = text.split("<!-- tests/checks/test_topology_checks.py runs this block")[1 + block]
    namespace: dict[str, object] = {}
    exec(marked.split("```python\n", 1)[1].split("```", 1)[0], namespace)
    settings.ROOT_URLCONF = "tests.sites.urls_without_limits"
    settings.CACHES = namespace["CACHES"]
    settings.DJANGO_RL = namespace.get("DJANGO_RL", {"CONNECTION": "ratelimit", "POLICIES": {}})
    assert check_settings() == []
