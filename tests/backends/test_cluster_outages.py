"""A Redis Cluster with a node down or hung, under traffic: bounded work, the rest keeps serving.

* The topology is read at most every 0.25 s (``REFRESH_INTERVAL``), however
  many decisions fail: counted by the ``CLUSTER SLOTS`` calls the live nodes
  served while a primary is down.
* A process that starts while every node hangs pays the startup nodes'
  timeouts once; the decisions after fail at once until the topology can be
  read, then are counted again.
* A primary that hangs costs one socket timeout per 0.25 s, not one per
  decision.
* The admin listing and ``ratelimit top`` show the primaries that answer and
  name the one that does not.

Failover is held off (``cluster-node-timeout`` 60 s) while a node is down, so
the topology does not change under the measurement; each test brings the
node back and restores the timeout, and the cluster is whole again after.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator

import pytest
from django.core.management import call_command
from redis.crc import key_slot

from django_rl import get_policy
from django_rl.backends.cluster import REFRESH_INTERVAL
from django_rl.inspection import Query, list_counters
from tests.conftest import start_of_fresh_window
from tests.support import figures
from tests.support.looping import LoopingThreads
from tests.support.topologies import NODE_TIMEOUT_MS, ClusterTopology

pytestmark = [pytest.mark.topologies, pytest.mark.slow]

TIMEOUT = 0.2
DAY_MS = 86_400_000
#: Left in the fixed window when a test starts: more than a test takes.
WINDOW_MARGIN_MS = 300_000
POLICIES = {
    # A day's window, entered with WINDOW_MARGIN_MS left (no_failover): a
    # window that ended mid-test would start the count again.
    "fw": {"algorithm": "fixed_window", "rate": "100/d", "key": "ip"},
    "sl": {"algorithm": "sliding_log", "rate": "100/h", "key": "ip"},
    "tb": {"algorithm": "token_bucket", "capacity": 100, "rate": "100/h", "key": "ip"},
}
THREADS = 4
#: What a decision that fails at once may take on a loaded 2-core machine,
#: where a thread may wait that long for the GIL or a core (160 ms seen):
#: far less than the startup nodes' timeouts (6 x 0.2 s) it no longer waits for.
FAST = 0.5
SECTION = f"a Redis Cluster node down or hung (socket timeout {TIMEOUT:g} s, {THREADS} threads)"


@pytest.fixture
def no_failover(settings, redis_cluster: ClusterTopology) -> Iterator[ClusterTopology]:
    """The cluster, failure detection held off (60 s) until the test ends; whole again after."""
    redis_cluster.flush()
    set_node_timeout(redis_cluster, 60_000)
    settings.CACHES = redis_cluster.caches(timeout=TIMEOUT)
    settings.DJANGO_RL = {"KEY_PREFIX": "o", "DENY_CACHE_SIZE": 0, "POLICIES": POLICIES}
    clock = redis_cluster.primary_servers()[0].client()
    try:
        start_of_fresh_window(clock, DAY_MS, min_left_ms=WINDOW_MARGIN_MS)
    finally:
        clock.close()
    try:
        yield redis_cluster
    finally:
        for server in redis_cluster.servers:
            if server.paused:
                server.resume()
        for server in redis_cluster.servers:
            if server.process is None:
                server.start(port=server.port, extra_args=server.extra_args)
        set_node_timeout(redis_cluster, NODE_TIMEOUT_MS)
        redis_cluster.wait_healthy()
        redis_cluster.flush()


def set_node_timeout(cluster: ClusterTopology, ms: int) -> None:
    for server in cluster.live():
        client = server.client()
        try:
            client.config_set("cluster-node-timeout", ms)
        finally:
            client.close()


def identities_on(cluster: ClusterTopology, server, count: int, start: int = 0) -> list[str]:
    """Return ``count`` identities whose slot ``server`` serves."""
    ranges = next(n["slots"] for n in cluster.nodes() if n["port"] == server.port)
    found = []
    i = start
    while len(found) < count:
        identity = f"ip:10.{i // 62500 % 250}.{i // 250 % 250}.{i % 250}"
        slot = key_slot(identity.encode())
        if any(low <= slot <= high for low, high in ranges):
            found.append(identity)
        i += 1
    return found


class Deciders(LoopingThreads):
    """Threads that decide without pause (``pause`` s between decisions), timing each."""

    join_timeout = 30

    def __init__(self, identities: list[str], threads: int = THREADS, pause: float = 0.0) -> None:
        super().__init__(threads)
        self.identities = identities
        self.pause = pause
        self.threads = threads
        self.made: list[tuple[float, float, bool]] = []  # (started, took, degraded)
        self._lock = threading.Lock()

    def _run(self, index: int) -> None:
        policies = [get_policy(name) for name in POLICIES]
        n = index
        while not self._stop.is_set():
            policy = policies[n % len(policies)]
            identity = self.identities[n % len(self.identities)]
            started = time.monotonic()
            degraded = policy.hit(identity).degraded
            with self._lock:
                self.made.append((started, time.monotonic() - started, degraded))
            n += self.threads
            if self.pause:
                time.sleep(self.pause)

    def between(self, start: float, end: float) -> list[tuple[float, float, bool]]:
        """Return the decisions that began and ended between ``start`` and ``end``."""
        return [m for m in self.made if start <= m[0] and m[0] + m[1] < end]


def cluster_slots_calls(cluster: ClusterTopology) -> int:
    total = 0
    for server in cluster.live():
        client = server.client()
        try:
            stats = client.info("commandstats")
        finally:
            client.close()
        total += int(stats.get("cmdstat_cluster|slots", {}).get("calls", 0))
    return total


def test_the_topology_is_read_at_most_every_quarter_second_while_a_primary_is_down(
    request, no_failover
):
    cluster = no_failover
    victim = cluster.primary_servers()[1]
    others = [s for s in cluster.primary_servers() if s is not victim]
    on_victim = identities_on(cluster, victim, 50)
    elsewhere = identities_on(cluster, others[0], 50)
    for identity in on_victim[:3] + elsewhere[:3]:
        get_policy("fw").hit(identity)  # the slot table is read; connections made
    victim.kill()
    # One thread decides every 30 ms on the dead primary's keys (each decision
    # fails, and asks for a read; a read takes less than 30 ms, so each would
    # start one); three others decide every 5 ms on a live primary's keys.
    with (
        Deciders(on_victim, threads=1, pause=0.03) as deciders,
        Deciders(elsewhere, threads=THREADS - 1, pause=0.005) as live,
    ):
        time.sleep(0.3)  # the first failures, and the first reads they ask for
        before, started = cluster_slots_calls(cluster), time.monotonic()
        time.sleep(2.0)
        reads, took = cluster_slots_calls(cluster) - before, time.monotonic() - started
    window = deciders.between(started, started + took)
    failed = sum(degraded for _, _, degraded in window)
    assert not any(degraded for _, _, degraded in live.between(started, started + took))
    figures.record(
        request.config,
        SECTION,
        f"a primary down: {reads} topology reads in {took:.1f} s "
        f"({reads / took:.1f}/s) while {failed} of {len(window)} decisions failed",
    )
    assert failed >= 30, "decisions on the dead primary did not fail"
    # One read every REFRESH_INTERVAL at most (and the one under way).
    assert reads <= took / REFRESH_INTERVAL + 1


def test_a_process_that_starts_while_the_cluster_hangs_fails_fast_after_the_first_failure(
    request, no_failover
):
    cluster = no_failover
    identities = [f"ip:10.20.0.{i}" for i in range(40)]
    for server in cluster.servers:
        server.pause()
    resumed_at = None
    try:
        started = time.monotonic()
        with Deciders(identities, pause=0.001) as deciders:
            time.sleep(3.0)
            hung = deciders.between(started, time.monotonic())
            for server in cluster.servers:
                server.resume()
            resumed_at = time.monotonic()
            deadline = resumed_at + 5
            while time.monotonic() < deadline:
                if any(not degraded for begun, _, degraded in deciders.made if begun > resumed_at):
                    break
                time.sleep(0.02)
            counted_at = min(
                (
                    begun + took
                    for begun, took, degraded in deciders.made
                    if begun > resumed_at and not degraded
                ),
                default=None,
            )
    finally:
        for server in cluster.servers:
            if server.paused:
                server.resume()
    first = sorted(hung)[:THREADS]
    later = sorted(hung)[THREADS:]
    worst_first = max(took for _, took, _ in first)
    worst_later = max((took for _, took, _ in later), default=0.0)
    startup = TIMEOUT * len(cluster.servers)
    figures.record(
        request.config,
        SECTION,
        f"started while every node hangs: {len(hung)} decisions in 3 s from {THREADS} threads, "
        f"the first {worst_first:.2f} s, the worst after it {worst_later * 1000:.0f} ms; "
        f"counted again {((counted_at or 0) - resumed_at) * 1000:.0f} ms after the nodes resumed",
    )
    assert all(degraded for _, _, degraded in hung)
    # The first decisions wait for the startup nodes (one timeout each, and
    # they queue behind the one that reads); every later one fails at once.
    assert worst_first <= startup + 1.0
    assert len(hung) >= 200
    assert worst_later <= FAST
    assert counted_at is not None and counted_at - resumed_at <= 2.0


def test_a_hung_primary_costs_one_timeout_per_quarter_second_not_one_per_decision(
    request, no_failover
):
    cluster = no_failover
    victim = cluster.primary_servers()[0]
    on_victim = identities_on(cluster, victim, 40)
    for identity in on_victim[:3]:
        get_policy("tb").hit(identity)
    victim.pause()
    try:
        with Deciders(on_victim, pause=0.001) as deciders:
            started = time.monotonic()
            time.sleep(2.0)
            ended = time.monotonic()
            victim.resume()
            resumed_at = time.monotonic()
            deadline = resumed_at + 5
            while time.monotonic() < deadline:
                if any(not d for begun, _, d in deciders.made if begun > resumed_at):
                    break
                time.sleep(0.02)
    finally:
        if victim.paused:
            victim.resume()
    hung = deciders.between(started, ended)
    waited = [took for _, took, _ in hung if took >= TIMEOUT * 0.9]
    counted = [begun + took for begun, took, d in deciders.made if begun > resumed_at and not d]
    figures.record(
        request.config,
        SECTION,
        f"a primary hung 2 s: {len(hung)} decisions from {THREADS} threads, {len(waited)} "
        f"waited for the timeout; counted again "
        f"{(min(counted) - resumed_at) * 1000:.0f} ms after it resumed"
        if counted
        else f"a primary hung 2 s: {len(hung)} decisions, {len(waited)} waited; never counted",
    )
    assert all(degraded for _, _, degraded in hung)
    # One call at a time waits for the node, at most every 0.25 s; the
    # threads already waiting when it hung wait once each.
    assert len(waited) <= (ended - started) / REFRESH_INTERVAL + THREADS + 1
    assert len(hung) >= 100
    assert counted and min(counted) - resumed_at <= 2.0


def test_the_admin_and_top_list_the_primaries_that_answer_and_name_the_one_that_does_not(
    no_failover, admin_client
):
    cluster = no_failover
    primaries = cluster.primary_servers()
    victim = primaries[1]  # in the middle: the walk goes on past it
    identities = {
        server.port: identities_on(cluster, server, 10, start=1000) for server in primaries
    }
    policy = get_policy("sl")
    for group in identities.values():
        for identity in group:
            policy.hit(identity, cost=3)
    victim.kill()
    missing = f"127.0.0.1:{victim.port}"
    answering = sorted(
        i for port, group in identities.items() if port != victim.port for i in group
    )
    # Under traffic on the primaries that answer, and on the dead one.
    with Deciders([i for group in identities.values() for i in group][::3], pause=0.005):
        seen: list[str] = []
        unavailable = set()
        cursor: str | None = "0:0"
        while cursor is not None:
            page = list_counters(Query(policy="sl", cursor=cursor, page_size=5))
            seen += [str(row.identity) for row in page.rows]
            unavailable.update(page.unavailable)
            cursor = page.next_cursor
        data = admin_client.get("/admin/django_rl/livecounter/data/?policy=sl").json()
        out = io.StringIO()
        call_command("ratelimit", "top", "sl", "--count", "30", stdout=out)
    assert sorted(set(seen)) == answering
    assert unavailable == {missing}
    assert sorted({row["identity"] for row in data["rows"]}) == answering
    assert data["unavailable"] == [missing]
    assert f"Not listed: the keys on {missing}, which did not answer." in data["summary"]
    listed = out.getvalue()
    assert all(identity in listed for identity in answering)
    assert f"Not listed: the keys on {missing}, which did not answer." in listed
