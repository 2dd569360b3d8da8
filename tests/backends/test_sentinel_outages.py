"""Sentinel under traffic: every sentinel down, and a forced failover.

* **Every sentinel down, the primary healthy.** Sentinel is the control
  plane: it only names the primary to new connections. Eight threads keep
  deciding on their connections while a ninth, new, cannot find the primary:
  its decision follows ``fail_open``, the eight go on counting, and one
  short warning line says what happened (the whole error at DEBUG).
* **A forced** ``SENTINEL FAILOVER``. The old primary stays healthy and takes
  writes until Sentinel demotes it, about 10 s later. Once one connection of
  the process reaches the new primary, every thread moves there: an identity
  is counted on one primary, and admitted at most the limit plus the hits in
  flight when the switch happened (one per thread).

The deny cache is off, so that every hit reaches Redis. Each test leaves the
group whole: the sentinels running, the old primary a replica of the new one.

Both tests count in fixed windows and sum the windows' keys at the end; a
window's key expires at its end, by design, so a test that crossed one would
miss the hits of the window that ended (and the failover's limit would start
again). So the windows are a day long, and each test starts with at least
:data:`WINDOW_MARGIN_MS` left in the day on the primary's clock (the app
servers' too: the same host), longer than the timeouts of the test's own
waits add up to: it holds at every moment of the clock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest

from django_rl import get_policy
from tests.conftest import start_of_fresh_window
from tests.support import figures
from tests.support.looping import LoopingThreads
from tests.support.topologies import SENTINEL_SERVICE, SentinelTopology, wait_for

pytestmark = [pytest.mark.topologies, pytest.mark.slow]

TIMEOUT = 0.2
LIMIT = 100
DAY_MS = 86_400_000
#: Left in the window when a test starts: above the sum of the timeouts of
#: its waits (the failover's: about 170 s), so it ends in the window it began.
WINDOW_MARGIN_MS = 300_000
POLICIES = {
    "fw": {"algorithm": "fixed_window", "rate": f"{LIMIT}/d", "key": "ip"},
    "big": {"algorithm": "fixed_window", "rate": "1000000/d", "key": "ip"},
}
THREADS = 8
SECTION = f"Sentinel under traffic ({THREADS} threads, socket timeout {TIMEOUT:g} s)"


@pytest.fixture
def on_sentinel(settings, redis_sentinel: SentinelTopology, caplog) -> Iterator[SentinelTopology]:
    caplog.set_level(logging.DEBUG, logger="django_rl")
    redis_sentinel.flush()
    primary = redis_sentinel.client()
    try:
        start_of_fresh_window(primary, DAY_MS, min_left_ms=WINDOW_MARGIN_MS)
    finally:
        primary.close()
    settings.CACHES = redis_sentinel.caches(timeout=TIMEOUT)
    settings.DJANGO_RL = {"KEY_PREFIX": "s", "DENY_CACHE_SIZE": 0, "POLICIES": POLICIES}
    try:
        yield redis_sentinel
    finally:
        for sentinel in redis_sentinel.sentinels:
            if sentinel.process is None:
                sentinel.start()
        redis_sentinel.wait_healthy()


class Hitters(LoopingThreads):
    """Threads that hit :attr:`target` (a policy name, an identity) until stopped.

    Each thread makes one decision first (on its own identity) and waits for
    the others (:meth:`wait_ready`), so that every thread holds a connection
    before the test acts; then they hit whatever :attr:`target` is at the
    time, each on the connection it keeps. Decisions are recorded as
    ``(started, policy, identity, allowed, degraded)``.
    """

    join_timeout = 30

    def __init__(self, target: tuple[str, str], threads: int = THREADS, first: int = 0) -> None:
        super().__init__(threads)
        self.target = target
        self.first = first
        self.made: list[tuple[float, str, str, bool, bool]] = []
        self._lock = threading.Lock()
        self._ready = threading.Barrier(threads + 1)

    def _stopping(self) -> None:
        self._ready.abort()  # a thread still waiting for the others gives up

    def wait_ready(self) -> None:
        self._ready.wait(30)

    def _run(self, index: int) -> None:
        get_policy("big").hit(f"ip:192.0.2.{self.first + index}")  # connects
        try:
            self._ready.wait(30)
        except threading.BrokenBarrierError:
            return
        while not self._stop.is_set():
            name, identity = self.target
            started = time.monotonic()
            decision = get_policy(name).hit(identity)
            with self._lock:
                self.made.append((started, name, identity, decision.allowed, decision.degraded))
            time.sleep(0.001)

    def of(self, identity: str) -> list[tuple[float, str, str, bool, bool]]:
        return [m for m in self.made if m[2] == identity]


def in_another_thread(call):
    """Return ``call()`` made in a new thread: one with no connection yet."""
    result = []
    thread = threading.Thread(target=lambda: result.append(call()))
    thread.start()
    thread.join(30)
    return result[0]


def test_with_every_sentinel_down_the_connections_that_work_keep_counting(
    request, on_sentinel, caplog
):
    group = on_sentinel
    steady = "ip:198.51.100.1"
    with Hitters(("big", steady)) as hitters:
        hitters.wait_ready()
        for sentinel in group.sentinels:
            sentinel.stop()
        try:
            time.sleep(0.2)
            # A new thread needs a new connection: no sentinel can name the primary.
            lost = in_another_thread(lambda: get_policy("big").hit("ip:198.51.100.2"))
            failed_at = time.monotonic()
            time.sleep(2.0)
            ended_at = time.monotonic()
        finally:
            for sentinel in group.sentinels:
                sentinel.start()
    after = [m for m in hitters.of(steady) if failed_at <= m[0] < ended_at]
    degraded = sum(m[4] for m in after)
    lines = [r for r in caplog.records if r.name == "django_rl" and r.levelno >= logging.INFO]
    figures.record(
        request.config,
        SECTION,
        f"every sentinel down, the primary healthy: {degraded} of {len(after)} decisions in the "
        f"2 s after a new connection failed were degraded; {len(lines)} log lines, "
        f"{max((len(r.getMessage()) for r in lines), default=0)} characters at most",
    )
    assert lost.degraded  # the new connection's: nobody could say where the primary is
    assert len(after) >= 200 and degraded == 0
    # Every decision was counted once, on the primary.
    assert counted(group, get_policy("big").key(steady)) == sum(
        not m[4] for m in hitters.of(steady)
    )
    warnings = [r.getMessage() for r in lines if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and len(warnings[0]) < 500
    assert warnings[0].startswith(
        "Redis for rate limiting (CACHES['default']) cannot be found by new connections: "
        "no sentinel names its primary (MasterNotFoundError: No master found for "
        f"'{SENTINEL_SERVICE}'); "
    )
    assert not [r for r in lines if "unavailable" in r.getMessage()]
    details = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    # The error lists each sentinel's client and failure: thousands of characters.
    assert [len(d) > 1000 for d in details if "the whole error: No master found" in d] == [True]


def sentinels_name(group: SentinelTopology) -> set[int]:
    """Return the ports the sentinels name as the primary."""
    ports = set()
    for sentinel in group.sentinels:
        client = sentinel.client()
        try:
            ports.add(int(client.sentinel_get_master_addr_by_name(SENTINEL_SERVICE)[1]))
        finally:
            client.close()
    return ports


def counted(group: SentinelTopology, key: str) -> int:
    """Return the hits counted in the fixed windows of ``key`` on the primary.

    Only windows whose keys are still there: the tests start well inside one
    (:data:`WINDOW_MARGIN_MS`), so there is one, and it holds every hit.
    """
    primary = group.client()
    try:
        return sum(int(primary.get(name)) for name in primary.scan_iter(match=f"{key}:*"))
    finally:
        primary.close()


def test_after_a_forced_failover_the_whole_process_counts_on_the_new_primary(request, on_sentinel):
    group = on_sentinel
    old = group.primary()
    warm, fresh = "ip:198.51.100.8", "ip:198.51.100.9"
    # Eight threads decide without pause on connections to the old primary.
    with Hitters(("big", warm)) as hitters:
        hitters.wait_ready()
        sentinel = group.sentinels[0].client()
        try:
            sentinel.execute_command("SENTINEL FAILOVER", SENTINEL_SERVICE)
        finally:
            sentinel.close()
        wait_for(lambda: group.primary() is not old, 20, "the sentinels to switch primaries")
        new_port = group.primary_port()
        # Every sentinel names the new primary (they tell each other within
        # about 2 s): a new connection, whichever it asks, reaches it.
        wait_for(lambda: sentinels_name(group) == {new_port}, 20, "every sentinel to agree")
        switched = time.monotonic()
        # A ninth thread starts: its new connection asks Sentinel and reaches
        # the new primary. Then all nine hit one fresh identity for 1 s.
        with Hitters(("big", warm), threads=1, first=THREADS) as newcomer:
            newcomer.wait_ready()
            time.sleep(0.05)  # the eight meet the news on their next decision
            hitters.target = newcomer.target = ("fw", fresh)
            time.sleep(1.0)
        role = old.client()
        try:
            still_primary = role.info("replication")["role"] == "master"
        finally:
            role.close()
    made = hitters.of(fresh) + newcomer.of(fresh)
    allowed = sum(m[3] and not m[4] for m in made)
    degraded = sum(m[4] for m in made)
    on_new = counted(group, get_policy("fw").key(fresh))
    figures.record(
        request.config,
        SECTION,
        f"forced SENTINEL FAILOVER: {allowed} allowed for a limit of {LIMIT} from "
        f"{THREADS + 1} threads ({degraded} degraded), within "
        f"{time.monotonic() - switched:.1f} s of the switch, the old primary "
        f"{'still taking writes' if still_primary else 'demoted by then'}",
    )
    # The old primary rejoins now, as a replica of the new one (Sentinel
    # would do it within 10 s); the fixture waits until the group is whole.
    demoted = old.client()
    try:
        demoted.replicaof("127.0.0.1", group.primary_port())
    finally:
        demoted.close()
    assert still_primary, "Sentinel demoted the old primary before the measurement ended"
    assert degraded == 0
    # One primary counts, the new one: the limit, plus at most a hit in
    # flight per thread when the news arrived.
    assert LIMIT <= allowed <= LIMIT + THREADS
    assert on_new == len(made)
