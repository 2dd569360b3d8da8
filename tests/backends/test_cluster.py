"""Redis Cluster by configuration alone: keys spread over the primaries, each decision on its node.

The cluster is the suite's own (``redis_cluster``: 3 primaries, 3 replicas);
Django's CACHES point at it through ``django_rl.redis_cluster.RedisClusterClient``.
"""

from __future__ import annotations

import io
import logging
import time
from collections import Counter

import pytest
import redis
from django.core.cache import cache
from django.core.management import call_command
from redis.crc import key_slot

from django_rl import get_policy
from django_rl.backends import get_backend
from django_rl.backends.cluster import ClusterBackend
from django_rl.inspection import Query, list_counters
from tests.backends.test_fail_open import HUNG_TIMEOUT, MARGIN
from tests.support import servers
from tests.support.redis_server import free_port
from tests.support.topologies import NODE_TIMEOUT_MS

pytestmark = pytest.mark.topologies

POLICIES = {
    "fw": {"algorithm": "fixed_window", "rate": "100/h", "key": "ip"},
    "sl": {"algorithm": "sliding_log", "rate": "100/h", "key": "ip"},
    "tb": {"algorithm": "token_bucket", "capacity": 100, "rate": "100/h", "key": "ip"},
}
IDENTITIES = [f"ip:10.{i // 250}.{i % 250}.1" for i in range(1000)]


@pytest.fixture
def on_cluster(settings, redis_cluster):
    redis_cluster.flush()
    settings.CACHES = redis_cluster.caches()
    settings.DJANGO_RL = {"KEY_PREFIX": "c", "POLICIES": POLICIES}
    return redis_cluster


def port_of(client) -> int:
    return int(client.connection_pool.connection_kwargs["port"])


def slot_owners(cluster) -> dict[int, int]:
    """Return slot -> port of the primary that serves it, from CLUSTER SLOTS."""
    owners = {}
    for low, high, primary, *_ in cluster.primaries()[0].execute_command("CLUSTER SLOTS"):
        for slot in range(low, high + 1):
            owners[slot] = primary[1]
    return owners


def test_keys_of_1000_identities_spread_over_every_primary(on_cluster):
    policy = get_policy("tb")
    for identity in IDENTITIES:
        assert policy.hit(identity).remaining == 99
    keys = [policy.key(identity) for identity in IDENTITIES]
    primaries = on_cluster.primaries()
    # The slot Redis computes is the one django_rl routed by.
    server_slots = [int(primaries[0].execute_command("CLUSTER KEYSLOT", k)) for k in keys]
    assert server_slots == [key_slot(k.encode()) for k in keys]
    owners = slot_owners(on_cluster)
    expected = Counter(owners[slot] for slot in server_slots)
    sizes = {port_of(client): client.dbsize() for client in primaries}
    assert sizes == dict(expected)
    assert len(sizes) == 3
    # 16384 slots in three even ranges: each primary holds about a third.
    assert all(280 <= size <= 390 for size in sizes.values()), sizes


def cmd_calls(client, name: str) -> int:
    return int(client.info("commandstats").get(f"cmdstat_{name}", {}).get("calls", 0))


@pytest.mark.skipif(servers.APP_CLOCK, reason="CLOCK 'app' reads no node's clock")
def test_each_decision_runs_on_its_node_and_reads_that_nodes_clock(on_cluster):
    primaries = on_cluster.primaries()
    times = [cmd_calls(c, "time") for c in primaries]
    execs = [cmd_calls(c, "exec") for c in primaries]
    identities = IDENTITIES[:60]
    ports = Counter(on_cluster.server_of(get_policy("fw").key(i)).port for i in identities)
    assert len(ports) == 3  # the identities cover every primary
    policy = get_policy("fw")
    for identity in identities:
        assert policy.hit(identity).remaining == 99
    # Fixed windows are numbered on the clock of the node that holds the key:
    # one TIME per node (per process), and each MULTI/EXEC on its node.
    assert [cmd_calls(c, "time") - t for c, t in zip(primaries, times, strict=True)] == [1, 1, 1]
    served = {port_of(c): cmd_calls(c, "exec") - e for c, e in zip(primaries, execs, strict=True)}
    assert served == dict(ports)


def test_the_django_cache_works_on_the_cluster(on_cluster):
    values = {f"item:{i}": i for i in range(60)}
    cache.set_many(values, 60)
    assert all(client.dbsize() > 0 for client in on_cluster.primaries())  # on every node
    assert cache.get_many(list(values)) == values  # an MGET per slot
    assert cache.get("item:7") == 7
    assert cache.incr("item:7") == 8
    assert cache.add("item:7", 0) is False
    assert cache.has_key("item:8") and not cache.has_key("missing")
    assert 0 < cache.ttl("item:8") <= 60
    cache.delete_many([f"item:{i}" for i in range(10)])
    assert cache.get_many([f"item:{i}" for i in range(10)]) == {}
    assert sorted(cache.keys("item:*")) == sorted(f"item:{i}" for i in range(10, 60))
    assert sorted(cache.iter_keys("item:1*")) == sorted(f"item:{i}" for i in range(10, 20))
    assert cache.delete_pattern("item:2*") == 10
    cache.clear()
    assert [client.dbsize() for client in on_cluster.primaries()] == [0, 0, 0]


def test_the_admin_listing_walks_every_primary_within_its_budget(on_cluster, admin_client):
    policy = get_policy("tb")
    for identity in IDENTITIES:
        policy.hit(identity)
    seen: list[str] = []
    cursor = "0:0"
    pages = 0
    while cursor is not None:
        page = list_counters(Query(policy="tb", page_size=200, cursor=cursor))
        assert page.keys_in_redis == 1000
        seen += [row.identity for row in page.rows]
        cursor, pages = page.next_cursor, pages + 1
    assert sorted(seen) == sorted(IDENTITIES)
    assert pages >= 3  # one walk per primary at least
    bounded = list_counters(Query(policy="tb", page_size=50, budget=100))
    assert bounded.examined <= 100 and bounded.next_cursor is not None
    data = admin_client.get("/admin/django_rl/livecounter/data/?policy=tb").json()
    assert data["keys_in_redis"] == 1000 and len(data["rows"]) >= 50


def test_the_command_finds_identities_on_every_node(on_cluster):
    policy = get_policy("sl")
    for identity in IDENTITIES[:30]:
        policy.hit(identity, cost=3)
    out = io.StringIO()
    call_command("ratelimit", "top", "sl", "--count", "30", stdout=out)
    listed = out.getvalue()
    assert all(identity in listed for identity in IDENTITIES[:30])
    assert "Walked every key in Redis (30)." in listed
    out = io.StringIO()
    call_command("ratelimit", "inspect", "sl", IDENTITIES[5], stdout=out)
    assert "remaining    97" in out.getvalue()
    out = io.StringIO()
    call_command("ratelimit", "reset", "--all-policies", IDENTITIES[5], stdout=out)
    assert policy.peek(IDENTITIES[5]).remaining == 100


def test_a_moved_slot_is_followed_at_once(on_cluster, caplog):
    caplog.set_level(logging.INFO, logger="django_rl")
    policy = get_policy("fw")
    identity = IDENTITIES[0]
    assert policy.peek(identity).remaining == 100  # the slot table is read now
    key = policy.key(identity)
    source = on_cluster.server_of(key)
    target = next(s for s in on_cluster.primary_servers() if s is not source)
    slot = key_slot(key.encode())
    move_slot(on_cluster, slot, source, target)
    try:
        # The MULTI meets MOVED on the source; the decision is made on the target.
        decision = policy.hit(identity)
        assert (decision.allowed, decision.degraded, decision.remaining) == (True, False, 99)
        assert on_cluster.server_of(key) is target
        assert (redis_on(source).dbsize(), redis_on(target).dbsize()) == (0, 1)
        assert policy.reset(identity) == 1
    finally:
        on_cluster.flush()
        move_slot(on_cluster, slot, target, source)
    # A redirect is no outage: nothing about the health of a node is logged.
    assert [r.levelname for r in caplog.records if "unavailable" in r.getMessage()] == []


def test_a_primary_at_maxmemory_fails_its_own_keys_and_logs_once_naming_it(on_cluster, caplog):
    # An error reply is per node, as outages are; it is no outage, so the
    # node keeps its connection and the slot table is not read again for it.
    caplog.set_level(logging.INFO, logger="django_rl")
    policy = get_policy("fw")
    backend = get_backend("default")
    full = IDENTITIES[0]
    node = backend.node_for(policy.key(full))
    other = next(i for i in IDENTITIES if backend.node_for(policy.key(i)) is not node)
    assert [policy.hit(i).remaining for i in (full, other)] == [99, 99]
    connection = node.client.client_id()
    admin = redis_on(on_cluster.server_of(policy.key(full)))
    try:
        admin.config_set("maxmemory", 1)  # noeviction, the default: writes answer OOM
        decisions = [(policy.hit(full).degraded, policy.hit(other).remaining) for _ in range(3)]
    finally:
        admin.config_set("maxmemory", 0)
        admin.close()
    assert decisions == [(True, 98), (True, 97), (True, 96)]
    assert policy.hit(full).remaining == 98  # counted again at once
    ((level, message),) = [
        (r.levelname, r.getMessage()) for r in caplog.records if r.name == "django_rl"
    ]
    assert level == "WARNING"
    assert message.startswith(
        f"Redis for rate limiting (CACHES['default'], node {node.address}) is out of memory "
    )
    assert (dict(node.health.errors), node.health.outages) == ({"oom": 3}, 0)
    assert node.client.client_id() == connection


def redis_on(server):
    return redis.Redis(port=server.port)


def move_slot(cluster, slot: int, source, target) -> None:
    """Move an empty slot from ``source`` to ``target``, the way resharding does."""
    ids = {n["port"]: n["id"] for n in cluster.nodes()}
    src, dst = redis.Redis(port=source.port), redis.Redis(port=target.port)
    try:
        dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", ids[source.port])
        src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", ids[target.port])
        for client in (dst, src):
            client.execute_command("CLUSTER SETSLOT", slot, "NODE", ids[target.port])
        for server in cluster.primary_servers():
            redis.Redis(port=server.port).execute_command(
                "CLUSTER SETSLOT", slot, "NODE", ids[target.port]
            )
    finally:
        src.close()
        dst.close()
    cluster.wait_healthy()  # replicas too see the new owner


def test_an_unreachable_cluster_fails_open_and_logs_once(settings, caplog):
    caplog.set_level(logging.INFO, logger="django_rl")
    settings.CACHES = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}",
            "OPTIONS": {
                "CLIENT_CLASS": "django_rl.redis_cluster.RedisClusterClient",
                "SOCKET_CONNECT_TIMEOUT": 0.2,
                "SOCKET_TIMEOUT": 0.2,
            },
        }
    }
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    assert isinstance(get_backend("default"), ClusterBackend)
    decisions = [get_policy(name).hit("ip:192.0.2.1") for name in POLICIES for _ in range(3)]
    assert all(d.allowed and d.degraded for d in decisions)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "CACHES['default']" in warnings[0]


def test_a_connection_factory_set_for_every_alias_does_not_apply_to_a_cluster(on_cluster, settings):
    settings.DJANGO_REDIS_CONNECTION_FACTORY = "django_redis.pool.SentinelConnectionFactory"
    settings.CACHES = on_cluster.caches()  # new cache clients, made under that setting
    cache.set("greeting", "hello", 60)
    assert cache.get("greeting") == "hello"
    assert get_policy("fw").hit(IDENTITIES[1]).remaining == 99


def test_a_hung_primary_costs_a_decision_one_socket_timeout(settings, redis_cluster):
    # redis-py's RedisCluster, on a timeout, reads the topology again and
    # retries, 10 times: 2.24 s here at a 0.2 s timeout. A decision does not
    # go through it. (The bounds of test_fail_open.py: two timeouts would fail.)
    timeout = HUNG_TIMEOUT
    for server in redis_cluster.live():  # no failover while the primary is paused
        redis.Redis(port=server.port).config_set("cluster-node-timeout", 60_000)
    settings.CACHES = redis_cluster.caches(timeout=timeout)
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    policy = get_policy("tb")
    assert policy.hit(IDENTITIES[2]).remaining == 99
    victim = redis_cluster.server_of(policy.key(IDENTITIES[2]))
    victim.pause()
    try:
        started = time.monotonic()
        decision = policy.hit(IDENTITIES[2])
        took = time.monotonic() - started
    finally:
        victim.resume()
        for server in redis_cluster.live():
            redis.Redis(port=server.port).config_set("cluster-node-timeout", NODE_TIMEOUT_MS)
    assert decision.allowed and decision.degraded
    assert timeout * 0.9 <= took <= timeout + MARGIN
