"""RateLimitedTask under real Celery workers and a real broker (a redis-server of the suite).

3 workers of 4 prefork processes each, started once for the module; each
worker's main process makes a decision before its pool forks (its kept
connection must not be shared with the children). The
load case: 300 tasks under one global 20/s policy start at most 20 in each
whole second of the Redis server's clock, all within about twice 300/20 s,
each exactly once, none failing; denied runs are re-scheduled (logged at
INFO, never ERROR). Chains and groups keep their order and results; a
task's own retry is still there after rate-limit delays (``max_retries``
not used up by them); a ``rate_key`` that raises or returns junk limits its
runs under the shared identity, and loses none.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery, chain, group

from tests.support import figures
from tests.support.redis_server import RedisServer
from tests.tasks.workers import Workers, client_app

pytestmark = pytest.mark.slow

WORKERS = 3
CONCURRENCY = 4
TASKS = 300
RATE = 20


@pytest.fixture(scope="module")
def broker() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def workers(broker: RedisServer, redis_server: RedisServer) -> Iterator[Workers]:
    started = Workers(broker, redis_server.django_rl_url(), WORKERS, CONCURRENCY)
    try:
        started.start()
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def app(broker: RedisServer) -> Iterator[Celery]:
    client = client_app(broker)
    try:
        yield client
    finally:
        client.close()


def starts(client: redis.Redis, key: str) -> list[tuple[list[str], float]]:
    """Return each recorded start: (its words, the server's time in seconds)."""
    found = []
    for raw in client.lrange(key, 0, -1):
        *words, seconds, micros = raw.decode().split()
        found.append((words, int(seconds) + int(micros) / 1e6))
    return found


def wait_for(client: redis.Redis, key: str, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while client.llen(key) < count and time.monotonic() < deadline:
        time.sleep(0.1)


def test_three_workers_start_at_most_20_a_second(
    workers: Workers, app: Celery, redis_client: redis.Redis, pytestconfig: Any
) -> None:
    seconds, micros = redis_client.time()
    sent_at = int(seconds) + int(micros) / 1e6
    results = [app.signature("tests.started", args=(n,)).apply_async() for n in range(TASKS)]
    wait_for(redis_client, "tasks:started", TASKS, timeout=4 * TASKS / RATE)
    assert [r.get(timeout=10) for r in results] == list(range(TASKS))  # none failed

    recorded = starts(redis_client, "tasks:started")
    numbers = Counter(int(words[0]) for words, _ in recorded)
    assert numbers == Counter(range(TASKS))  # every task ran, exactly once
    per_second = Counter(int(at) for _, at in recorded)
    assert max(per_second.values()) <= RATE, sorted(per_second.items())
    took = max(at for _, at in recorded) - sent_at
    assert took <= 2 * TASKS / RATE, took
    logs = workers.logs()
    assert "rate limited by tasks.global" in logs
    assert " ERROR/" not in logs and "CRITICAL" not in logs
    figures.record(
        pytestconfig,
        f"celery: {TASKS} tasks, {WORKERS} workers x {CONCURRENCY}, {RATE}/s global",
        f"took {took:.1f} s (best possible {TASKS / RATE - 1:.0f}-{TASKS / RATE:.0f} s); starts "
        f"per second: {[per_second[s] for s in sorted(per_second)]}",
    )


def test_chains_and_groups(workers: Workers, app: Celery, redis_client: redis.Redis) -> None:
    add = app.signature("tests.add")
    chained = chain(add.clone(args=(1, 2)), add.clone(args=(10,)), add.clone(args=(100,)))
    grouped = group(add.clone(args=(n, n)) for n in range(6))
    chain_result = chained.apply_async()
    group_result = grouped.apply_async()
    assert chain_result.get(timeout=30) == 113
    assert group_result.get(timeout=30) == [0, 2, 4, 6, 8, 10]
    recorded = starts(redis_client, "tasks:add")
    assert len(recorded) == 9  # each ran once
    per_second = Counter(int(at) for _, at in recorded)
    assert max(per_second.values()) <= 2
    order = [words[0] for words, _ in recorded if words[0] in {"1+2", "3+10", "13+100"}]
    assert order == ["1+2", "3+10", "13+100"]  # a chain passes each result on first


def test_rate_limit_delays_do_not_count_against_max_retries(
    workers: Workers, app: Celery, redis_client: redis.Redis
) -> None:
    results = [app.signature("tests.flaky", args=(n,)).apply_async() for n in range(3)]
    # Each retries once by itself (max_retries=1), and is denied by 1/s in between.
    assert [r.get(timeout=30) for r in results] == [1, 1, 1]
    runs = Counter(tuple(words) for words, _ in starts(redis_client, "tasks:flaky"))
    assert runs == Counter({(str(n), r): 1 for n in range(3) for r in ("0", "1")})


def test_rate_key_junk_shares_one_identity(
    workers: Workers, app: Celery, redis_client: redis.Redis
) -> None:
    customers = ["b", "c", "none", "a"]
    results = [app.signature("tests.keyed", args=(c,)).apply_async() for c in customers]
    assert [r.get(timeout=30) for r in results] == customers  # none lost
    recorded = starts(redis_client, "tasks:keyed")
    shared = [at for words, at in recorded if words[0] != "a"]
    assert len(shared) == 3
    # The three failing keys count as one identity at 1/s: three seconds apart.
    assert len({int(at) for at in shared}) == 3
    logs = workers.logs()
    assert "its rate_key raised KeyError" in logs
    assert "its rate_key returned None" in logs
