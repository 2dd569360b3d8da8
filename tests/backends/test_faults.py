"""Fault injection: Redis killed, restarted, flushed, paused, loading and failed over under traffic.

Threads send requests through Django's test client to decorated and DRF views
of every algorithm (tests/sites/urls_faults.py) while a fault hits a redis-server
this test started. For every fault:

* zero 500 responses: every answer is 200 or 429;
* every request, during the fault and after, answered within the socket
  timeout plus :data:`MARGIN` (a margin for a busy machine; the bound of one
  timeout per decision is checked tightly by test_fail_open.py);
* limits enforced again within 1 s of Redis answering (a fresh client gets
  exactly the limit, then 429, on each algorithm);
* one warning and one info line in the log per outage (none for SCRIPT
  FLUSH, which is no outage).

The figures appear in the "fault injection" section at the end of the run
(and in docs/reliability.md).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from django.test import Client

from django_rl.backends import get_backend
from tests.conftest import FAULT_TIMEOUT
from tests.support import figures
from tests.support.looping import LoopingThreads
from tests.support.redis_server import RedisServer, caches_for
from tests.support.tcp_proxy import TcpProxy

# django_db: Django's test Client drops close_old_connections around each
# response.close() and connects it again after; with requests from several
# threads, one thread's request_finished can meet it connected again, and
# then checks this thread's database connection, which earlier database
# tests left open: without database access allowed, pytest-django raises.
pytestmark = [pytest.mark.slow, pytest.mark.faults, pytest.mark.django_db]

POLICIES = {
    "per_minute": {"algorithm": "fixed_window", "rate": "5/m", "key": "ip"},
    # Fails closed: a request it cannot count is denied with 429, never a 500.
    "log": {"algorithm": "sliding_log", "rate": "5/m", "key": "ip", "fail_open": False},
    "bucket": {"algorithm": "token_bucket", "capacity": 5, "rate": "5/m", "key": "ip"},
}
URLS = [
    "/window/",
    "/window-async/",
    "/window-class/",
    "/api/window/",
    "/log/",
    "/api/log/",
    "/bucket/",
    "/api/bucket/",
]
#: One URL per policy, decorator and DRF both, for the enforcement probe.
PROBE_URLS = ["/window/", "/api/log/", "/bucket/"]
THREADS = 6
#: How long a fault lasts before Redis is brought back.
HOLD = 1.0
#: What a request may take beyond the socket timeout: 7 threads share one GIL
#: on a 2-core machine that other work shares too. Worst seen while the
#: machine was loaded (load average 9): 0.6 s. The unit tests in
#: test_fail_open.py check the bound (one timeout, not two) more tightly.
MARGIN = 0.8
#: Limits must be enforced again within this long of Redis answering. Seen
#: on a quiet machine: 0.2-0.4 s (the figures this suite prints); seen with
#: four other test runs on the same 2 cores (load average 5): 1.07 s for the
#: failover behind a moved address, whose recovery also waits for every
#: thread to meet READONLY and reconnect.
RECOVERY = 2.0
SECTION = f"fault injection (socket timeout {FAULT_TIMEOUT:g} s, {THREADS} threads of traffic)"


@dataclass(frozen=True)
class Sample:
    sent: float
    latency: float
    status: int


class Traffic(LoopingThreads):
    """Threads that send requests round the URLs until stopped, recording each answer.

    With ``busy``, the first thread sends every request as that one client address.
    """

    def __init__(self, threads: int = THREADS, busy: str | None = None) -> None:
        super().__init__(threads)
        self.busy = busy
        self.samples: list[Sample] = []

    def _run(self, index: int) -> None:
        client = Client(raise_request_exception=False)  # a crash is a 500, counted
        sent = 0
        while not self._stop.is_set():
            url = URLS[(sent + index) % len(URLS)]
            # A new client address every 3 rounds: some requests are denied.
            address = f"10.{index}.{sent // (3 * len(URLS)) % 250}.1"
            if index == 0 and self.busy is not None:
                address = self.busy
            started = time.monotonic()
            status = client.get(url, REMOTE_ADDR=address).status_code
            self.samples.append(Sample(started, time.monotonic() - started, status))
            sent += 1


class Probe:
    """Fresh clients that check the limits are counted in Redis, not degraded.

    :param addresses: the fresh client addresses to use (default: 198.18.x.y).
    """

    def __init__(self, addresses: Iterator[str] | None = None) -> None:
        self.client = Client(raise_request_exception=False)
        self.clients = 0
        self.addresses = addresses

    def enforced(self) -> bool:
        """Return whether a new client gets exactly the limit (5), then 429, on every policy."""
        self.clients += 1
        address = f"198.18.{self.clients // 250}.{self.clients % 250}"
        if self.addresses is not None:
            address = next(self.addresses)
        for url in PROBE_URLS:
            statuses = [self.client.get(url, REMOTE_ADDR=address).status_code for _ in range(6)]
            if statuses != [200] * 5 + [429]:
                return False
        return True

    def wait_until_enforced(self, timeout: float = 10) -> float:
        """Return the moment limits were enforced again."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.enforced():
                return time.monotonic()
        raise AssertionError("limits were not enforced again")


@dataclass(frozen=True)
class Outcome:
    samples: list[Sample]
    fault_at: float
    answered_at: float
    enforced_at: float

    def sent_between(self, start: float, end: float) -> int:
        return sum(start <= s.sent < end for s in self.samples)

    @property
    def recovery(self) -> float:
        return self.enforced_at - self.answered_at


#: Traffic goes on this long after limits hold again, in seconds.
AFTER_ENFORCED = 0.2


def run_fault(fault: Callable[[], float]) -> Outcome:
    """Send traffic, inject ``fault`` (it returns when Redis answers again), probe, stop."""
    probe = Probe()
    assert probe.enforced(), "limits must hold before the fault"
    with Traffic() as traffic:
        time.sleep(0.3)
        fault_at = time.monotonic()
        answered_at = fault()
        enforced_at = probe.wait_until_enforced()
        time.sleep(AFTER_ENFORCED)
    return Outcome(traffic.samples, fault_at, answered_at, enforced_at)


def check(request, caplog, name: str, outcome: Outcome, outage: bool = True) -> None:
    statuses = Counter(s.status for s in outcome.samples)
    during = outcome.sent_between(outcome.fault_at, outcome.answered_at)
    recovering = outcome.sent_between(outcome.answered_at, outcome.enforced_at)
    latencies = sorted(s.latency for s in outcome.samples)
    p99, worst = latencies[len(latencies) * 99 // 100], latencies[-1]
    figures.record(
        request.config,
        SECTION,
        f"{name:<12} requests: {during:>4} during the fault, {recovering:>3} after it until "
        f"limits held; 500s: {statuses[500]}; latency p99 {p99 * 1000:3.0f} ms, worst "
        f"{worst * 1000:3.0f} ms; limits held {outcome.recovery * 1000:3.0f} ms after Redis "
        f"answered (all {sum(statuses.values())}: {statuses[200]} x 200, {statuses[429]} x 429)",
    )
    assert_answered_in_time(statuses, worst)
    assert outcome.recovery <= RECOVERY
    if outage:
        # Traffic went on through the fault: every thread sent requests from
        # the fault until the 0.2 s after limits held. (Not "during" alone: a
        # failover behind a moved address is over in a few ms, and limits can
        # hold again before any thread has sent its next request.)
        through = outcome.sent_between(outcome.fault_at, outcome.enforced_at + AFTER_ENFORCED)
        assert through >= THREADS
    # One warning per outage and one line when it ends, in that order. The
    # fault is one outage; on a loaded machine a timeout while Redis catches
    # up can be another, and is logged as such, so the count is the backend's.
    # Such a timeout in the traffic's last moments leaves an outage that no
    # later call has seen end: its warning is the last line, with no "back".
    records = [r for r in caplog.records if r.name == "django_rl"]
    health = get_backend("default").health
    outages = health.outages
    logged = ["WARNING", "INFO"] * outages
    assert [r.levelname for r in records] == (logged[:-1] if health.down else logged)
    if outage:
        assert outages >= 1
    else:
        # Not an outage (NOSCRIPT is answered in the same round trip); only a
        # timeout of the loaded machine may be one.
        assert all("NoScript" not in r.getMessage() for r in records)


def assert_answered_in_time(statuses: Counter[int], worst: float) -> None:
    """Assert no answer was a 500 (every one is 200 or 429), none later than the bound."""
    assert set(statuses) <= {200, 429}, statuses
    assert worst <= FAULT_TIMEOUT + MARGIN


@pytest.fixture
def fault_site(settings, private_redis, caplog):
    settings.ROOT_URLCONF = "tests.sites.urls_faults"
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    caplog.set_level(logging.INFO, logger="django_rl")
    return private_redis


def test_sigkill_then_restart(request, caplog, fault_site: RedisServer):
    def fault() -> float:
        fault_site.kill()
        time.sleep(HOLD)
        fault_site.start(port=fault_site.port)
        return time.monotonic()

    check(request, caplog, "SIGKILL", run_fault(fault))


def test_graceful_restart(request, caplog, fault_site: RedisServer):
    def fault() -> float:
        fault_site.stop()  # SIGTERM: the server closes every connection
        time.sleep(0.3)
        fault_site.start(port=fault_site.port)
        return time.monotonic()

    check(request, caplog, "restart", run_fault(fault))


def test_sigstop_then_sigcont(request, caplog, fault_site: RedisServer):
    def fault() -> float:
        fault_site.pause()
        time.sleep(HOLD)
        fault_site.resume()
        return time.monotonic()

    check(request, caplog, "SIGSTOP/CONT", run_fault(fault))


def test_script_flush(request, caplog, fault_site: RedisServer):
    admin = fault_site.client()

    def fault() -> float:
        for _ in range(5):
            admin.script_flush()
            time.sleep(0.1)
        return time.monotonic()

    try:
        check(request, caplog, "SCRIPT FLUSH", run_fault(fault), outage=False)
    finally:
        admin.close()


def test_restart_into_loading(request, caplog, fault_site: RedisServer):
    fault_site.save_filler(keys=3000)

    def fault() -> float:
        fault_site.restart_loading(load_delay_us=300)  # about 1 s of LOADING
        fault_site.wait_until_answering()
        return time.monotonic()

    check(request, caplog, "LOADING", run_fault(fault))


def test_failover_to_a_replica_behind_a_moved_address(settings, request, caplog):
    # The application reaches Redis through an address (DNS, a Service, a
    # proxy) that is moved to the replica when it is promoted; the old
    # primary, demoted, keeps the connections it had and answers READONLY.
    primary, replica = RedisServer(), RedisServer()
    primary.start()
    replica.start()
    proxy = TcpProxy(primary.port)
    admin_primary, admin_replica = primary.client(), replica.client()
    try:
        admin_replica.replicaof("127.0.0.1", primary.port)
        replica.wait_until_synced()
        settings.ROOT_URLCONF = "tests.sites.urls_faults"
        settings.CACHES = caches_for(
            f"redis://127.0.0.1:{proxy.port}/0?client_name=django_rl_failover",
            SOCKET_CONNECT_TIMEOUT=FAULT_TIMEOUT,
            SOCKET_TIMEOUT=FAULT_TIMEOUT,
        )
        settings.DJANGO_RL = {"POLICIES": POLICIES}
        caplog.set_level(logging.INFO, logger="django_rl")

        def fault() -> float:
            admin_replica.replicaof("NO", "ONE")
            admin_primary.replicaof("127.0.0.1", replica.port)
            proxy.repoint(replica.port)
            return time.monotonic()

        outcome = run_fault(fault)
    finally:
        admin_primary.close()
        admin_replica.close()
        proxy.close()
        primary.close()
        replica.close()
    # The fault starts when Redis (the new primary) already answers: the
    # READONLY answers all come during the recovery.
    check(request, caplog, "failover", outcome, outage=True)
