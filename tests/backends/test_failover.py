"""Failover under traffic: a cluster primary, then Sentinel's primary, killed with SIGKILL.

Threads send requests through decorated and DRF views of every algorithm
(tests/sites/urls_faults.py, the views of test_faults.py), one of them always as
the same busy client, while the primary that holds that client's keys is
killed. (Over its limit, the busy client is answered by the deny cache,
without Redis, failover or not.) A thread meanwhile makes decisions through
``Policy.hit`` on each policy for fresh clients whose keys live on the
killed primary, to see what they are. For each topology:

* zero 500 responses: every answer is 200 or 429;
* every request and decision answered within the socket timeout plus
  ``MARGIN`` (test_faults.py explains the margin);
* decisions the failover made degraded follow the policy: allowed where it
  fails open, denied where it fails closed; and there were some (the
  failover was seen);
* limits enforced again (a fresh client whose keys live where the killed
  primary's did gets exactly the limit, then 429, on every algorithm)
  within :data:`RECOVERY` of the replica's promotion.

The killed server is started again afterwards and rejoins as a replica, so
the topology is whole for the tests that follow. The figures appear in the
"failover" section at the end of the run (and in docs/scaling.md).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import redis
from redis.crc import key_slot

from django_rl import get_policy
from tests.backends.test_faults import MARGIN, POLICIES, Probe, Traffic, assert_answered_in_time
from tests.conftest import FAULT_TIMEOUT
from tests.support import figures
from tests.support.redis_server import RedisServer

# django_db: Django's test Client drops close_old_connections around each
# response.close() and connects it again after; with requests from several
# threads, one thread's request_finished can meet it connected again, and
# then checks this thread's database connection, which earlier database
# tests left open: without database access allowed, pytest-django raises.
pytestmark = [pytest.mark.slow, pytest.mark.faults, pytest.mark.topologies, pytest.mark.django_db]

#: Limits must be enforced again within this long of the replica's promotion.
RECOVERY = 5.0
BUSY = "10.99.0.1"
SECTION = f"failover (SIGKILL of the primary under traffic, socket timeout {FAULT_TIMEOUT:g} s)"


@dataclass(frozen=True)
class Made:
    """One decision made with ``Policy.hit`` for a fresh client."""

    policy: str
    allowed: bool
    degraded: bool
    latency: float


class Decisions:
    """A thread that makes a decision on every policy for one fresh client after another."""

    def __init__(self, addresses: Iterator[str]) -> None:
        self.made: list[Made] = []
        self._addresses = addresses
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def __enter__(self) -> Decisions:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            identity = f"ip:{next(self._addresses)}"
            for name in POLICIES:
                started = time.monotonic()
                decision = get_policy(name).hit(identity)
                latency = time.monotonic() - started
                self.made.append(Made(name, decision.allowed, decision.degraded, latency))
            time.sleep(0.002)


def wait_for_promotion(replica: RedisServer, timeout: float = 20) -> float:
    """Return the moment ``replica`` reports itself a primary."""
    client = replica.client(socket_timeout=1)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if client.info("replication")["role"] == "master":
                    return time.monotonic()
            except redis.RedisError:
                pass
            time.sleep(0.01)
    finally:
        client.close()
    raise AssertionError("the replica was not promoted")


def run_failover(
    victim: RedisServer, replica: RedisServer, fresh: Callable[[], Iterator[str]]
) -> tuple[Traffic, Decisions, float, float, float]:
    """Kill ``victim`` under traffic; return the traffic, the decisions, kill, promotion, limits.

    ``fresh()`` yields client addresses whose keys live on ``victim``.
    """
    addresses = fresh()
    probe = Probe(addresses)
    assert probe.enforced(), "limits must hold before the failover"
    with Traffic(busy=BUSY) as traffic, Decisions(addresses) as decisions:
        time.sleep(0.5)
        killed_at = time.monotonic()
        victim.kill()
        promoted_at = wait_for_promotion(replica)
        enforced_at = probe.wait_until_enforced(timeout=RECOVERY + 5)
        time.sleep(0.3)
    return traffic, decisions, killed_at, promoted_at, enforced_at


def check(request, caplog, name: str, result: tuple[Traffic, Decisions, float, float, float]):
    traffic, decisions, killed_at, promoted_at, enforced_at = result
    statuses = Counter(s.status for s in traffic.samples)
    during = sum(killed_at <= s.sent < enforced_at for s in traffic.samples)
    worst = max(s.latency for s in traffic.samples)
    degraded = [m for m in decisions.made if m.degraded]
    by_policy = Counter(m.policy for m in degraded)
    worst_decision = max(m.latency for m in decisions.made)
    figures.record(
        request.config,
        SECTION,
        f"{name:<8} promoted {promoted_at - killed_at:4.1f} s after the kill; limits held "
        f"{(enforced_at - promoted_at) * 1000:4.0f} ms after the promotion; {during} requests "
        f"from kill to recovery; 500s: {statuses[500]}; worst latency {worst * 1000:3.0f} ms "
        f"(requests), {worst_decision * 1000:3.0f} ms (decisions); {len(degraded)} of "
        f"{len(decisions.made)} decisions for fresh clients degraded "
        f"({', '.join(f'{p} {n}' for p, n in sorted(by_policy.items()))}); all "
        f"{sum(statuses.values())}: {statuses[200]} x 200, {statuses[429]} x 429",
    )
    assert_answered_in_time(statuses, worst)
    assert worst_decision <= FAULT_TIMEOUT + MARGIN
    assert degraded, "the failover was not seen"
    for made in decisions.made:
        # A fresh client: allowed when counted; else as its policy fails.
        assert made.allowed == (not made.degraded or POLICIES[made.policy].get("fail_open", True))
    assert enforced_at - promoted_at <= RECOVERY
    warnings = [r for r in caplog.records if r.name == "django_rl" and r.levelname == "WARNING"]
    assert warnings, "the outage was not logged"


@pytest.fixture
def fault_site(settings, caplog):
    settings.ROOT_URLCONF = "tests.sites.urls_faults"
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    caplog.set_level(logging.INFO, logger="django_rl")
    return settings


def addresses_where(accept: Callable[[str], bool]) -> Iterator[str]:
    """Yield fresh client addresses whose identity ``accept``s."""
    for i in itertools.count():
        address = f"198.{18 + i // 62500}.{i // 250 % 250}.{i % 250}"
        if accept(f"ip:{address}"):
            yield address


def test_cluster_primary_killed_under_traffic(request, caplog, fault_site, redis_cluster):
    cluster = redis_cluster
    cluster.flush()
    fault_site.CACHES = cluster.caches(timeout=FAULT_TIMEOUT)
    victim = cluster.server_of(f"ip:{BUSY}")
    replica = cluster.replica_of(victim)
    ranges = next(n["slots"] for n in cluster.nodes() if n["port"] == victim.port)

    def on_victim(identity: str) -> bool:
        slot = key_slot(identity.encode())
        return any(low <= slot <= high for low, high in ranges)

    try:
        result = run_failover(victim, replica, lambda: addresses_where(on_victim))
    finally:
        cluster.restart(victim)  # it rejoins as the replica of the promoted one
    check(request, caplog, "cluster", result)


def test_sentinel_primary_killed_under_traffic(request, caplog, fault_site, redis_sentinel):
    sentinel = redis_sentinel
    sentinel.flush()
    fault_site.CACHES = sentinel.caches(timeout=FAULT_TIMEOUT)
    victim, replica = sentinel.primary(), sentinel.replica()
    try:
        result = run_failover(victim, replica, lambda: addresses_where(lambda identity: True))
    finally:
        sentinel.restart_as_replica(victim)
    check(request, caplog, "sentinel", result)
