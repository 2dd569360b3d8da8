"""The outage fallback under gunicorn: the fault suite's faults, several worker processes.

gunicorn serves ``tests/sites/settings_gunicorn.py`` with :data:`WORKERS` sync
workers: a decorated view and a DRF view on one ``sliding_log`` policy of
6/h per client address with a ``fallback_rate`` of 2/h (the docs' recipe for
3 processes: the policy's limit divided by the worker count). The test
starts its own redis-server (and, for the failover, a replica and a TCP
proxy), and talks HTTP to gunicorn from :data:`THREADS` threads. Every
response says which worker served it and whether Redis or the worker's
local fallback decided (``tests/sites/urls_gunicorn.py``).

Before each fault, each of :data:`ADDRESSES` clients uses up its 6 in Redis.
Then the threads send requests round the clients and both views while one
fault hits Redis (SIGKILL, SIGSTOP, a restart, a failover to the replica
behind a moved address; as ``tests/backends/test_faults.py`` makes them), and go on
after Redis answers again. Asserted, for each fault:

* **zero 500s**: every answer is 200 or 429, and every 429 has Retry-After;
* **exactly the fallback allowance per process**: for each client and
  worker, the local 200s are ``min(local decisions, 2)``, told remaining 1
  and 0; so per client at most 2 x 3 workers, the documented site-wide
  bound (``fallback_rate`` x processes), and the headers of a local
  decision describe the fallback limit;
* **nothing beyond what Redis had not counted**: where Redis kept its counts
  (a paused server, a replica promoted) it admits no more of those clients
  after the fault; where it lost them (a kill, a restart: no persistence),
  at most its limit again;
* **Redis-backed again** within :data:`RECOVERY` of Redis answering (the
  last local decision), and afterwards a fresh client gets exactly 6, then
  429, from Redis, whichever worker serves each request;
* one warning and one recovery line per outage in each worker's log, the
  warning naming the policy that decides locally.

And the bound counts processes, not workers at a time: a worker gunicorn
starts in place of one killed during the outage admits a client its own 2.

The figures appear in the "outage fallback under gunicorn" section at the
end of the run (and in docs/reliability.md).
"""

from __future__ import annotations

import math
import os
import re
import signal
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from tests.conftest import FAULT_TIMEOUT
from tests.support import figures
from tests.support.gunicorn_server import FALLBACK, LIMIT, Gunicorn
from tests.support.looping import LoopingThreads
from tests.support.redis_server import RedisServer
from tests.support.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.slow, pytest.mark.faults]

WORKERS = 3
#: More concurrent clients than workers: every worker serves the traffic.
THREADS = 6
ADDRESSES = [f"203.0.113.{i}" for i in range(1, 4)]
URLS = ["/login/", "/api/login/"]
#: How long Redis cannot answer in each fault but the failover (as long as
#: test_faults.py's 1 s, and a little more: with Redis paused, each request
#: holds its worker a socket timeout, and the workers should each see a
#: client more than the fallback allows).
HOLD = 1.5
#: Decisions must be Redis's again within this long of Redis answering: the
#: bound of test_faults.py, whose recovery includes the failover's READONLY.
RECOVERY = 2.0
#: Traffic goes on this long after Redis answers, to see the recovery.
AFTER = RECOVERY + 0.5
#: A fault must not straddle an edge of the fallback's hour windows (a new
#: window is a new allowance): a scenario starts with this much left.
WINDOW_MARGIN = 40.0
SECTION = (
    f"outage fallback under gunicorn ({WORKERS} sync workers, fallback_rate {FALLBACK}/h, "
    f"bound {FALLBACK * WORKERS} per client; socket timeout {FAULT_TIMEOUT:g} s)"
)


@dataclass(frozen=True)
class Answer:
    """One response of the site, as the test read it."""

    sent: float  #: ``time.monotonic()`` when the request was sent
    received: float  #: and when its answer was read
    address: str
    status: int
    worker: int  #: the pid that served it
    decided: str  #: ``redis``, ``local`` (the fallback) or ``fail-open``
    quota: int  #: ``q`` of RateLimit-Policy: the limit the headers describe
    window: int  #: ``w`` of RateLimit-Policy
    remaining: int  #: ``r`` of RateLimit
    retry_after: int | None
    #: Seconds left in the fallback's hour window (this host's clock) when
    #: the request was sent, and when its answer was read.
    left_at_send: float
    left_at_receipt: float


def left_in_hour() -> float:
    """Return the seconds left in the current hour of this host's wall clock."""
    return 3600 - time.time() % 3600


_POLICY = re.compile(r'"login";q=(\d+);w=(\d+)')
_REMAINING = re.compile(r'"login";r=(\d+);t=\d+')


def ask(site: Gunicorn, path: str, address: str) -> Answer:
    """Send one request as the client ``address``; return what it was told.

    :raises AssertionError: if the answer does not say who decided and how
        (a 500 does not).
    """
    left_at_send, sent = left_in_hour(), time.monotonic()
    status, headers = site.get(path, {"X-Real-IP": address})
    received, left_at_receipt = time.monotonic(), left_in_hour()
    policy = _POLICY.fullmatch(headers.get("RateLimit-Policy", ""))
    counted = _REMAINING.fullmatch(headers.get("RateLimit", ""))
    assert policy and counted and "X-Decided" in headers, (status, headers)
    quota, window = policy.groups()
    remaining = counted.group(1)
    retry_after = headers.get("Retry-After")
    return Answer(
        sent,
        received,
        address,
        status,
        int(headers["X-Worker"]),
        headers["X-Decided"],
        int(quota),
        int(window),
        int(remaining),
        None if retry_after is None else int(retry_after),
        left_at_send,
        left_at_receipt,
    )


class Traffic(LoopingThreads):
    """Threads that send requests round the clients and views until stopped.

    A request that gets no HTTP answer at all is recorded in :attr:`failures`.
    """

    def __init__(self, site: Gunicorn) -> None:
        super().__init__(THREADS)
        self.site = site
        self.answers: list[Answer] = []
        self.failures: list[str] = []

    def _run(self, index: int) -> None:
        sent = 0
        while not self._stop.is_set():
            address = ADDRESSES[(index + sent) % len(ADDRESSES)]
            path = URLS[(index + sent // len(ADDRESSES)) % len(URLS)]
            try:
                self.answers.append(ask(self.site, path, address))
            except Exception as exc:  # a 500 has no RateLimit headers: it lands here too
                self.failures.append(f"{path} {address}: {exc!r}")
            sent += 1


def fresh_fallback_window() -> None:
    """Wait, if need be, until :data:`WINDOW_MARGIN` is left in the fallback's hour window.

    The workers' windows are aligned on this host's clock (``fallback.now_ms``).
    """
    left = left_in_hour()
    if left < WINDOW_MARGIN:
        time.sleep(left + 0.5)


def use_up_in_redis(site: Gunicorn, address: str) -> list[Answer]:
    """Send ``address``'s requests until Redis denies it (its 6 used up); return the answers."""
    answers = []
    for sent in range(3 * LIMIT):
        answer = ask(site, URLS[sent % len(URLS)], address)
        answers.append(answer)
        if (answer.decided, answer.status) == ("redis", 429):
            return answers
    raise AssertionError(f"Redis never denied {address}: {answers}")


@dataclass(frozen=True)
class Outcome:
    """What one fault's run saw (times are ``time.monotonic()``)."""

    before: list[Answer]  #: the answers that used each client's limit up in Redis
    during: list[Answer]  #: the traffic's answers, from before the fault until after it
    failures: list[str]
    fault_at: float
    answered_at: float  #: when Redis answered again


def run_fault(site: Gunicorn, fault: Callable[[], float]) -> Outcome:
    """Use the clients' limits up, send traffic, inject ``fault``; it returns when Redis answers."""
    fresh_fallback_window()
    before = [answer for address in ADDRESSES for answer in use_up_in_redis(site, address)]
    with Traffic(site) as traffic:
        time.sleep(0.3)
        fault_at = time.monotonic()
        answered_at = fault()
        time.sleep(AFTER)
    return Outcome(before, traffic.answers, traffic.failures, fault_at, answered_at)


def check(
    request: pytest.FixtureRequest,
    name: str,
    site: Gunicorn,
    outcome: Outcome,
    *,
    kept: bool,
    held: bool = True,
) -> None:
    """Assert what the module docstring lists.

    ``kept``: whether Redis kept its counts through the fault. ``held``:
    whether Redis could not answer for :data:`HOLD`, so that every client's
    requests met the fault (a failover is over in an instant: each worker
    meets it once, on the connection it had).
    """
    answers = outcome.before + outcome.during
    statuses = Counter(a.status for a in answers)
    local = [a for a in answers if a.decided == "local"]
    redis_after = [a for a in outcome.during if a.decided == "redis"]
    by_pair: dict[tuple[str, int], list[Answer]] = defaultdict(list)
    for answer in local:
        by_pair[answer.address, answer.worker].append(answer)
    admitted = {
        address: sum(a.status == 200 for a in local if a.address == address)
        for address in ADDRESSES
    }
    again = {
        address: sum(a.status == 200 for a in redis_after if a.address == address)
        for address in ADDRESSES
    }
    during = sum(outcome.fault_at <= a.sent < outcome.answered_at for a in outcome.during)
    # Everything each client got through: before, during and after the fault.
    total = {a: sum(x.status == 200 for x in answers if x.address == a) for a in ADDRESSES}
    # The docs' bound around a switch: what Redis had not counted (its limit,
    # and its limit again when it lost its counts) plus the fallback's
    # allowance in each process.
    around = LIMIT + FALLBACK * WORKERS + (0 if kept else LIMIT)
    # From this moment on every decision was Redis's: the last local answer.
    last_local = max((a.received for a in local), default=outcome.answered_at)
    recovery = max(0.0, last_local - outcome.answered_at)
    figures.record(
        request.config,
        SECTION,
        f"{name:<9} {len(answers):>4} requests ({during} during the fault), "
        f"500s: {statuses[500] + len(outcome.failures)}; "
        f"{len(local):>3} decided locally by {len({a.worker for a in local})} workers; "
        f"admitted locally per client {sorted(admitted.values())} (bound "
        f"{FALLBACK * WORKERS}); by Redis after the fault {sorted(again.values())}; in all "
        f"{sorted(total.values())} (bound {around}); "
        f"Redis-backed again {recovery * 1000:.0f} ms after it answered",
    )
    assert not outcome.failures, outcome.failures[:5]
    assert set(statuses) <= {200, 429}, statuses  # zero 500s
    assert all(a.retry_after is not None and a.retry_after >= 1 for a in answers if a.status == 429)
    assert all(a.retry_after is None for a in answers if a.status == 200)
    # The fallback replaces fail_open: no decision let through without a count.
    assert {a.decided for a in answers} <= {"redis", "local"}
    # Every process that served was there from the start: none was replaced,
    # so the processes are the WORKERS the bound counts.
    assert {a.worker for a in answers} <= set(site.seen)
    # The headers describe the limit that decided: the fallback's, or Redis's.
    assert {(a.quota, a.window) for a in local} == {(FALLBACK, 3600)}
    assert {(a.quota, a.window) for a in answers if a.decided == "redis"} == {(LIMIT, 3600)}
    # Every worker met the fault and decided locally: the bound's processes.
    assert {a.worker for a in local} == set(site.seen)
    if held:
        assert {a.address for a in local} == set(ADDRESSES)
    # Exactly the fallback allowance in each process that saw a client.
    for seen in by_pair.values():
        # The first min(n, 2) of its n local decisions were let through, and
        # told 1 then 0 remaining: no two requests admitted on the same count.
        allowed = sorted(a.remaining for a in seen if a.status == 200)
        assert allowed == list(range(FALLBACK - min(len(seen), FALLBACK), FALLBACK)), seen
        # A local denial waits for the end of the fallback's hour window:
        # Retry-After is what was left of it when the worker decided, rounded
        # up. (Give or take 1 s: the worker's clock is the wall clock read
        # when it started, moved on by the monotonic clock.)
        for answer in seen:
            if answer.status == 429:
                assert answer.remaining == 0
                assert answer.retry_after is not None
                low, high = math.ceil(answer.left_at_receipt), math.ceil(answer.left_at_send)
                assert low - 1 <= answer.retry_after <= high + 1, answer
    for address in ADDRESSES:
        workers = {worker for (who, worker) in by_pair if who == address}
        expected = sum(min(len(by_pair[address, w]), FALLBACK) for w in workers)
        assert admitted[address] == expected <= FALLBACK * WORKERS
    # Redis admits these clients no more than it had not counted.
    if kept:
        assert set(again.values()) == {0}, again
    else:
        for address in ADDRESSES:
            counted_after = sum(
                a.sent >= outcome.answered_at for a in redis_after if a.address == address
            )
            assert min(counted_after, LIMIT) <= again[address] <= LIMIT
    assert max(total.values()) <= around
    # Redis-backed again, and the traffic went on after the recovery bound.
    assert recovery <= RECOVERY
    assert any(a.sent > outcome.answered_at + RECOVERY for a in redis_after)
    assert_enforced_by_redis(site)
    assert_logged_once_per_outage(site, {a.worker for a in local})


def assert_enforced_by_redis(site: Gunicorn) -> None:
    """Assert a fresh client gets exactly the policy's limit from Redis, then 429."""
    answers = [ask(site, URLS[i % len(URLS)], "198.51.100.1") for i in range(LIMIT + 1)]
    assert [(a.status, a.decided, a.remaining) for a in answers] == [
        *((200, "redis", LIMIT - 1 - i) for i in range(LIMIT)),
        (429, "redis", 0),
    ]


def assert_logged_once_per_outage(site: Gunicorn, deciders: set[int]) -> None:
    """Assert each worker logged an outage warning then a recovery line, per outage, in turn.

    Every worker that decided locally logged at least one outage, whose
    warning names the policy that decides at its fallback_rate.
    """
    lines: dict[int, list[tuple[str, str]]] = defaultdict(list)
    with open(site.log) as log:
        for line in log:
            pid, logger, level, message = line.rstrip("\n").split(" ", 3)
            if logger == "django_rl":  # not the denials' lines (django_rl.denials)
                lines[int(pid)].append((level, message))
    assert set(lines) <= set(site.seen)
    for logged in lines.values():
        assert [level for level, _ in logged] == ["WARNING", "INFO"] * (len(logged) // 2), logged
        for _, warning in logged[::2]:
            assert "policies 'login' decide in each process at their fallback_rate" in warning
    assert deciders <= set(lines)


@pytest.fixture
def redis_site() -> Iterator[tuple[RedisServer, Gunicorn]]:
    """A redis-server of the test's own, and gunicorn serving the site against it."""
    server = RedisServer()
    site: Gunicorn | None = None
    try:
        server.start()  # first: its URL names the port it got
        site = Gunicorn(server.url, FAULT_TIMEOUT, workers=WORKERS)
        site.start()
        yield server, site
    finally:
        if site is not None:
            site.close()
        server.close()


def test_sigkill_then_restart(request, redis_site):
    server, site = redis_site

    def fault() -> float:
        server.kill()
        time.sleep(HOLD)
        server.start(port=server.port)
        return time.monotonic()

    check(request, "SIGKILL", site, run_fault(site, fault), kept=False)


def test_graceful_restart(request, redis_site):
    server, site = redis_site

    def fault() -> float:
        server.stop()  # SIGTERM: the server closes every connection
        time.sleep(HOLD)
        server.start(port=server.port)
        return time.monotonic()

    check(request, "restart", site, run_fault(site, fault), kept=False)


def test_sigstop_then_sigcont(request, redis_site):
    server, site = redis_site

    def fault() -> float:
        server.pause()
        time.sleep(HOLD)
        server.resume()
        return time.monotonic()

    check(request, "SIGSTOP", site, run_fault(site, fault), kept=True)


def test_failover_to_a_replica_behind_a_moved_address(request):
    # As in test_faults.py: the site reaches Redis through an address moved
    # to the replica when it is promoted; the old primary, demoted, keeps
    # the connections it had and answers READONLY.
    primary, replica = RedisServer(), RedisServer()
    proxy: TcpProxy | None = None
    site: Gunicorn | None = None
    try:
        # No delay before the full sync (Redis waits 5 s for more replicas).
        primary.start(extra_args=["--repl-diskless-sync-delay", "0"])
        replica.start()
        proxy = TcpProxy(primary.port)
        site = Gunicorn(f"redis://127.0.0.1:{proxy.port}/0", FAULT_TIMEOUT, workers=WORKERS)
        admin_primary, admin_replica = primary.client(), replica.client()
        try:
            admin_replica.replicaof("127.0.0.1", primary.port)
            replica.wait_until_synced()
            site.start()

            def fault() -> float:
                # The clients' counts reach the replica before it is promoted.
                admin_primary.wait(1, 5000)
                admin_replica.replicaof("NO", "ONE")
                admin_primary.replicaof("127.0.0.1", replica.port)
                proxy.repoint(replica.port)
                return time.monotonic()

            outcome = run_fault(site, fault)
            check(request, "failover", site, outcome, kept=True, held=False)
        finally:
            admin_primary.close()
            admin_replica.close()
    finally:
        if site is not None:
            site.close()
        if proxy is not None:
            proxy.close()
        primary.close()
        replica.close()


def test_a_worker_started_during_the_outage_has_an_allowance_of_its_own(request, redis_site):
    """The bound counts processes: a worker gunicorn starts in the window adds its allowance.

    With Redis dead, concurrent requests of one client go round the workers
    until each has admitted its 2; one worker is then SIGKILLed, gunicorn
    starts another, and that one admits the client 2 more: 8 in the window,
    not 6 (docs/reliability.md says so).
    """
    server, site = redis_site
    address = "203.0.113.50"
    fresh_fallback_window()
    server.kill()
    answers: list[Answer] = []

    def until_each_worker_denies(deadline: float) -> None:
        # Until every worker gunicorn runs now has decided FALLBACK + 1
        # times for the client (admitted its allowance, then denied).
        while time.monotonic() < deadline:
            seen = Counter(a.worker for a in answers)
            workers = set(site.worker_pids())
            if len(workers) == WORKERS and all(seen[w] > FALLBACK for w in workers):
                return
            with ThreadPoolExecutor(THREADS) as pool:
                answers.extend(pool.map(lambda i: ask(site, URLS[i % 2], address), range(THREADS)))
        served = Counter(a.worker for a in answers)
        raise AssertionError(f"not every worker served the client: {served}")

    until_each_worker_denies(time.monotonic() + 30)
    victim = min(site.seen)
    os.kill(victim, signal.SIGKILL)
    started = time.monotonic()
    while victim in site.worker_pids() and time.monotonic() < started + 10:
        time.sleep(0.05)
    until_each_worker_denies(time.monotonic() + 60)
    workers = {a.worker for a in answers}
    newcomers = workers - set(site.seen)
    admitted = Counter(a.worker for a in answers if a.status == 200)
    figures.record(
        request.config,
        SECTION,
        f"a worker replaced during the outage: {len(answers)} requests of one client, "
        f"admitted {sum(admitted.values())} by {len(workers)} processes "
        f"({FALLBACK} each; {WORKERS} workers at a time)",
    )
    assert {(a.status, a.decided) for a in answers} <= {(200, "local"), (429, "local")}
    assert len(newcomers) == 1 and victim in workers
    # Each process, the newcomer too, admitted exactly its allowance.
    assert admitted == {worker: FALLBACK for worker in workers}
    assert sum(admitted.values()) == FALLBACK * (WORKERS + 1)
