"""Fixtures: the suite's own redis-server, and Django pointed at it; a cluster and Sentinel."""

from __future__ import annotations

import gc
import itertools
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.test import override_settings

from django_rl.observability.history import RECORDER
from django_rl.overrides import LOADER
from django_rl.policies import block_reading
from django_rl.policies.deny_cache import get_deny_cache
from django_rl.policies.fallback import get_fallback_store
from tests.support import figures, servers
from tests.support.redis_server import RedisServer, caches_for
from tests.support.topologies import ClusterTopology, SentinelTopology, SingleTopology, Topology


def pytest_terminal_summary(terminalreporter: Any, config: Any) -> None:
    if servers.SERVER != "redis" or servers.MODES:
        terminalreporter.write_line(f"django_rl test server: {servers.describe()}")
    figures.report(terminalreporter, config)


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """Mark the acceptance suites: the tests that run on every topology (``make test-servers``)."""
    for item in items:
        if "topology" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.acceptance)


@pytest.fixture(scope="session", autouse=True)
def _overrides_load_when_asked() -> None:
    """No loader thread of overrides in this process unless a test starts one.

    It reads the change marker in Redis every second and the database on a
    change: in tests that count commands or log lines, or hold the test
    database in a transaction, that would land at random. The tests of
    overrides load them by hand (``LOADER.load()``) or start the thread;
    processes the tests spawn run it as a deployment does.
    """
    LOADER.autostart = False
    # The same for the history's flushing thread: the tests of history
    # flush by hand (``history.flush()``) or start it.
    RECORDER.autostart = False


@pytest.fixture(autouse=True)
def _no_overrides() -> None:
    """Every test starts with no overrides in force in this process, and no incident."""
    LOADER.reset()


@pytest.fixture(scope="module", autouse=True)
def _earlier_modules_out_of_collections() -> Iterator[None]:
    """Collect the garbage between test modules, then keep what is left out of later collections.

    The suite's process holds what earlier tests left (Django's test client
    registers a finalizer per request, each Redis Cluster client made keeps
    a table of 16,384 slots, ...): late in a run, a full collection took up
    to a second, and it lands wherever it falls, in the timing tests too
    (a decision's latency under a frozen Redis measured 0.2 s late). Frozen
    (``gc.freeze``), those objects are skipped by the collections a test
    triggers; each module starts with one full collection instead, outside
    any test, so what its tests left behind is freed there.
    """
    gc.unfreeze()
    with warnings.catch_warnings():
        # What an earlier test left unclosed (a socket) warns as it is freed
        # here, in another module's setup: not this module's doing. (Freed
        # during the test that made it, it warns there, as before.)
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    gc.freeze()
    yield


@pytest.fixture(autouse=True)
def _earlier_tests_out_of_collections(_earlier_modules_out_of_collections: None) -> None:
    """Each test's collections see only what it made (see above; ``gc.freeze`` is cheap)."""
    gc.freeze()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A redis-server this suite started, on a free port; stopped at the end."""
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session", autouse=True)
def _django_uses_redis_server(redis_server: RedisServer) -> Iterator[None]:
    with override_settings(CACHES=caches_for(redis_server.url)):
        yield


#: SOCKET_TIMEOUT and SOCKET_CONNECT_TIMEOUT of the connection to a private server.
FAULT_TIMEOUT = 0.2
_private_servers = itertools.count()


@pytest.fixture
def private_redis(settings: Any) -> Iterator[RedisServer]:
    """A redis-server of this test alone, which it may kill, pause and restart.

    Django's CACHES point at it with socket timeouts of :data:`FAULT_TIMEOUT`.
    The URL names the client uniquely: django-redis keeps one pool per URL
    for the whole process, and a port can come round again. CACHES is set
    through the ``settings`` fixture, so that it is restored in order with
    the test's own changes to settings.
    """
    server = RedisServer()
    server.start()
    point_caches_at(settings, server, FAULT_TIMEOUT)
    try:
        yield server
    finally:
        server.close()


def _started(topology: ClusterTopology | SentinelTopology) -> Iterator[Any]:
    try:
        topology.start()
        yield topology
    finally:
        topology.close()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[ClusterTopology]:
    """A Redis Cluster (3 primaries, 3 replicas) this suite started; stopped at the end."""
    yield from _started(ClusterTopology())


@pytest.fixture(scope="session")
def redis_sentinel() -> Iterator[SentinelTopology]:
    """A primary, a replica and 3 sentinels this suite started; stopped at the end."""
    yield from _started(SentinelTopology())


#: The topologies the acceptance suites run on (``topology`` fixture). Those
#: the suite builds (cluster, Sentinel) carry the ``topologies`` marker.
TOPOLOGIES = [
    pytest.param("single"),
    pytest.param("cluster", marks=pytest.mark.topologies),
    pytest.param("sentinel", marks=pytest.mark.topologies),
]


@pytest.fixture(scope="module", params=TOPOLOGIES)
def topology(request: Any, redis_server: RedisServer) -> Iterator[Topology]:
    """Each topology in turn, Django's CACHES pointed at it for the module's tests.

    Module-scoped, so pytest runs a module's tests topology by topology and
    module fixtures that depend on it (spawned workers) are made once each.
    Tests that use it should also use :func:`keyspace`, which empties it.
    """
    if request.param == "single":
        chosen: Topology = SingleTopology(redis_server)
    elif servers.TLS_MODE:
        pytest.skip("TLS mode: the single server only (see tests/support/servers.py)")
    else:
        chosen = request.getfixturevalue(f"redis_{request.param}")
    with override_settings(CACHES=chosen.caches()):
        yield chosen


@pytest.fixture
def keyspace(topology: Topology) -> Any:
    """The whole keyspace of ``topology``, emptied before the test: a client that sees it all."""
    topology.flush()
    denials = get_deny_cache()
    if denials is not None:
        denials.clear()
    return topology.client()


def point_caches_at(settings: Any, server: RedisServer, timeout: float) -> None:
    """Set CACHES to ``server`` with socket timeouts of ``timeout``, through a new pool."""
    url = f"{server.url}?client_name=django_rl_{next(_private_servers)}"
    settings.CACHES = caches_for(url, SOCKET_CONNECT_TIMEOUT=timeout, SOCKET_TIMEOUT=timeout)


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client of the suite's server, emptied before the test."""
    client = redis_server.client()
    client.flushall()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(autouse=True)
def _empty_redis(redis_server: RedisServer) -> None:
    """Every test starts with an empty Redis (ours: never a shared one)."""
    client = redis_server.client()
    try:
        client.flushall()
    finally:
        client.close()
    # Denials remembered by an earlier test are about state just flushed.
    denials = get_deny_cache()
    if denials is not None:
        denials.clear()
    # As are local counts and episodes of an earlier test's outage.
    get_fallback_store().clear()
    # And counts of history an earlier test made, not yet written.
    RECORDER.discard()
    # And the policies an earlier test blocked an identity of (their marks are gone).
    block_reading.forget()


def server_ms(client: redis.Redis) -> int:
    """Return the Redis server's clock in ms."""
    seconds, microseconds = client.time()
    return int(seconds) * 1000 + int(microseconds) // 1000


def sleep_until(client: redis.Redis, target_ms: int) -> None:
    """Sleep until the Redis server's clock reads ``target_ms`` (or later)."""
    while (remaining := target_ms - server_ms(client)) > 0:
        time.sleep(remaining / 1000)


def start_of_fresh_window(client: redis.Redis, period_ms: int, min_left_ms: int) -> int:
    """Return the server time at which at least ``min_left_ms`` remain in the window.

    Waits for the next window when the current one is too close to its end,
    so a test's hits cannot straddle an edge.
    """
    now = server_ms(client)
    left = period_ms - now % period_ms
    if left < min_left_ms:
        sleep_until(client, now + left)
        now = server_ms(client)
    return now
