"""Fixed windows follow the Redis server's clock, measured without a round trip per hit."""

from __future__ import annotations

import threading
import time

import pytest

from django_rl import get_policy
from django_rl.backends.clock import ServerClock
from tests.conftest import server_ms


def test_the_estimate_tracks_the_redis_clock(redis_client):
    backend = get_policy("per_minute").backend
    for _ in range(5):
        before = server_ms(redis_client)
        estimate = backend.now_ms()
        after = server_ms(redis_client)
        # Within the measurement's own error (half a round trip) plus a margin
        # for a busy machine.
        assert before - 20 <= estimate <= after + 20


def test_a_skewed_local_wall_clock_changes_nothing(monkeypatch, redis_client):
    # An app server whose wall clock is a day ahead: a window index taken from
    # it would be 1,440 minutes off.
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 86_400)
    policy = get_policy("per_minute")
    policy.hit("ip:skew")
    (key,) = redis_client.keys("rl:per_minute:*")
    window = int(key.decode().rsplit(":", 1)[1])
    now_window = server_ms(redis_client) // 60_000
    assert window in (now_window, now_window - 1)  # -1: a minute began in between


class CountingTime:
    def __init__(self) -> None:
        self.reads = 0

    def __call__(self) -> tuple[int, int]:
        self.reads += 1
        now = time.time()
        return int(now), int(now % 1 * 1e6)


def test_the_offset_is_measured_once_then_every_interval():
    read = CountingTime()
    clock = ServerClock(read, resync_interval=0.2)
    for _ in range(100):
        clock.now_ms()
    assert read.reads == 1
    time.sleep(0.25)
    clock.now_ms()
    clock.now_ms()
    assert read.reads == 2


def test_a_failed_measurement_is_retried_on_the_next_call():
    calls = []

    def flaky() -> tuple[int, int]:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("down")
        return 1_700_000_000, 250_000

    clock = ServerClock(flaky)
    with pytest.raises(ConnectionError):
        clock.now_ms()
    assert abs(clock.now_ms() - 1_700_000_000_250) < 50


def test_waiters_for_a_first_measurement_that_fails_give_up_with_it():
    # 8 threads of a fresh process while Redis hangs: one measures, the
    # others wait for it and then give up, instead of measuring in turn.
    reads = []

    def hung_server() -> tuple[int, int]:
        reads.append(1)
        time.sleep(0.5)
        raise TimeoutError("Timeout reading from socket")

    clock = ServerClock(hung_server)
    barrier = threading.Barrier(8)
    outcomes: list[tuple[str, float]] = []

    def worker() -> None:
        barrier.wait()
        started = time.monotonic()
        try:
            clock.now_ms()
        except Exception as exc:
            outcomes.append((type(exc).__name__, time.monotonic() - started))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(reads) == 1
    assert sorted(name for name, _ in outcomes) == ["ClockUnavailable"] * 7 + ["TimeoutError"]
    assert max(elapsed for _, elapsed in outcomes) < 0.5 + 0.3


def test_a_hung_resync_costs_only_its_caller_and_keeps_the_offset():
    measured = threading.Event()

    def read() -> tuple[int, int]:
        if not measured.is_set():
            measured.set()
            return 1_700_000_000, 0
        time.sleep(0.3)  # Redis hangs during the resync
        raise TimeoutError("Timeout reading from socket")

    clock = ServerClock(read, resync_interval=0.05)
    first = clock.now_ms()
    time.sleep(0.06)
    failures = []

    def resync_in_the_background() -> None:
        try:
            clock.now_ms()
        except TimeoutError as exc:
            failures.append(exc)

    resync = threading.Thread(target=resync_in_the_background)
    resync.start()
    time.sleep(0.05)  # the resync is under way
    started = time.monotonic()
    estimate = clock.now_ms()  # does not wait for it: the old offset serves
    assert time.monotonic() - started < 0.05
    resync.join()
    assert len(failures) == 1
    assert 100 <= estimate - first <= 400
