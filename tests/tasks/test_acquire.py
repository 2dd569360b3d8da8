"""``django_rl.acquire`` / ``aacquire`` / ``limited``: waiting instead of refusing.

The load case: 16 threads each acquire(wait=5) three times on a 10/s fixed
window, together. Every second of the Redis server's clock lets exactly 10
through (the last second the 8 left); each sleep between two hits of a
thread lasts its denial's ``retry_after``, never less, and at most 50 ms
more; the round trips per acquire, as requests the server reads (``INFO
stats`` ``total_reads_processed``), are at most 3 on average.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from typing import Any

import pytest
import redis

import django_rl
from django_rl import Decision, Policy, get_policy
from django_rl.exceptions import RateLimited
from tests.conftest import server_ms, start_of_fresh_window
from tests.support import figures

POLICIES = {
    "ten": {"algorithm": "fixed_window", "rate": "10/s", "key": "ip"},
    "slow": {"algorithm": "fixed_window", "rate": "2/10s", "key": "ip"},
    "gcra": {"algorithm": "gcra", "rate": "5/s", "burst": 1, "key": "ip"},
    "slots": {"algorithm": "concurrency", "limit": 1, "timeout": 60, "key": "ip"},
    "closed": {"algorithm": "fixed_window", "rate": "1/h", "key": "ip", "fail_open": False},
    "open": {"algorithm": "fixed_window", "rate": "1/h", "key": "ip", "fail_open": True},
}

THREADS = 16
ACQUIRES = 3
# A pause (a denial's return to the next hit's start) may last at most this
# much more than its retry_after: the sleep, then this process's turn (16
# threads waking at one window's start take turns, TURN_WAIT at most each).
SLACK = 0.05
SECTION = f"acquire: {THREADS} threads x {ACQUIRES} acquires, a 10/s policy"


@pytest.fixture(autouse=True)
def _policies(settings: Any) -> None:
    settings.DJANGO_RL = {"POLICIES": POLICIES}


class Recording:
    """A policy's ``hit`` with the time each call started and each Decision came back."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.name = policy.name
        self.calls: list[tuple[float, float, Decision]] = []

    def hit(self, identity: str, cost: int = 1) -> Decision:
        started = time.monotonic()
        decision = self.policy.hit(identity, cost)
        self.calls.append((started, time.monotonic(), decision))
        return decision

    def pauses(self) -> list[tuple[float, float]]:
        """Return (slept, retry_after) for each denial followed by another hit."""
        return [
            (after[0] - before[1], before[2].retry_after)
            for before, after in zip(self.calls, self.calls[1:], strict=False)
            if not before[2].allowed
        ]


def reads(client: redis.Redis) -> int:
    return int(client.info("stats")["total_reads_processed"])


@pytest.mark.slow
def test_sixteen_threads_ten_a_second(redis_client: redis.Redis, pytestconfig: Any) -> None:
    policy = get_policy("ten")
    policy.hit("warm-up")  # the node learns the server before the count starts
    start_of_fresh_window(redis_client, 1000, 900)
    offset_ms = server_ms(redis_client) - time.time() * 1000
    starts = threading.Barrier(THREADS)
    allowed_at: list[float] = []
    denied: list[Decision] = []
    recordings: list[Recording] = []
    lock = threading.Lock()

    def work() -> None:
        recording = Recording(policy)
        starts.wait()
        for _ in range(ACQUIRES):
            decision = django_rl.acquire(recording, "client", wait=5)  # type: ignore[arg-type]
            now_ms = time.time() * 1000 + offset_ms
            # The second the hit was counted in: its window ends reset_after
            # after the decision, on a whole second of the server's clock; this
            # thread reads the time a little later (a busy machine: tens of ms),
            # so the end is the whole second nearest to now + reset_after.
            counted_in = round((now_ms + decision.reset_after * 1000) / 1000) - 1
            with lock:
                (allowed_at if decision.allowed else denied).append(counted_in * 1000.0)
        with lock:
            recordings.append(recording)

    before = reads(redis_client)
    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    round_trips = reads(redis_client) - before - 1  # the INFO of `before` is read too

    assert denied == []
    per_second = Counter(int(ms // 1000) for ms in allowed_at)
    counts = [per_second[s] for s in sorted(per_second)]
    total = THREADS * ACQUIRES
    assert counts == [10] * (total // 10) + [total % 10], counts
    pauses = [p for r in recordings for p in r.pauses()]
    assert pauses, "some thread slept"
    for slept, retry_after in pauses:
        assert retry_after <= slept <= retry_after + SLACK, (slept, retry_after)
    worst = max(slept - retry_after for slept, retry_after in pauses)
    figures.record(
        pytestconfig,
        SECTION,
        f"{round_trips / total:.2f} round trips per acquire (connections' setup included), "
        f"a sleep at most {worst * 1000:.1f} ms past its retry_after, per second: {counts}",
    )
    assert round_trips / total <= 3, round_trips


def test_a_wait_shorter_than_retry_after_returns_at_once(redis_client: redis.Redis) -> None:
    start_of_fresh_window(redis_client, 10_000, 6_000)  # 2/10s: > 2 s left once denied
    assert django_rl.acquire("slow", "c").allowed
    assert django_rl.acquire("slow", "c").allowed
    started = time.monotonic()
    decision = django_rl.acquire("slow", "c", wait=2)
    assert time.monotonic() - started < 0.5
    assert not decision.allowed
    assert decision.retry_after > 2


def test_acquire_waits_for_the_next_chance() -> None:
    assert django_rl.acquire("gcra", "c").allowed
    recording = Recording(get_policy("gcra"))
    started = time.monotonic()
    decision = django_rl.acquire(recording, "c", wait=1)  # type: ignore[arg-type]
    waited = time.monotonic() - started
    assert decision.allowed
    [(slept, retry_after)] = recording.pauses()
    assert 0.1 < retry_after <= slept < retry_after + SLACK
    assert waited >= retry_after


def test_aacquire_never_blocks_the_loop() -> None:
    async def main() -> tuple[Decision, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        assert (await django_rl.aacquire("gcra", "a")).allowed
        task = asyncio.ensure_future(ticker())
        decision = await django_rl.aacquire("gcra", "a", wait=1)
        task.cancel()
        return decision, ticks

    decision, ticks = asyncio.run(main())
    assert decision.allowed
    assert ticks >= 5  # the loop turned while aacquire slept (about 0.2 s)


def test_limited_raises_rate_limited_with_the_decision() -> None:
    with django_rl.limited("slow", "x", wait=0.1) as first:
        assert first.allowed
    with django_rl.limited("slow", "x"):
        pass
    with pytest.raises(RateLimited) as raised, django_rl.limited("slow", "x", wait=0.5):
        pytest.fail("entered a denied block")
    assert raised.value.decision.policy == "slow"
    assert not raised.value.decision.allowed


def test_async_limited() -> None:
    async def main() -> None:
        async with django_rl.limited("slow", "y") as decision:
            assert decision.allowed
        async with django_rl.limited("slow", "y"):
            pass
        with pytest.raises(RateLimited):
            async with django_rl.limited("slow", "y", wait=0.2):
                pytest.fail("entered a denied block")

    asyncio.run(main())


def test_limited_gives_concurrency_slots_back() -> None:
    for _ in range(3):
        with django_rl.limited("slots", "z") as decision:
            assert decision.allowed
            assert not django_rl.acquire("slots", "z").allowed


def test_bad_waits() -> None:
    with pytest.raises(ValueError):
        django_rl.acquire("ten", "c", wait=-1)
    with pytest.raises(ValueError):
        django_rl.acquire("ten", "c", wait=float("nan"))
    with pytest.raises(TypeError):
        django_rl.acquire("ten", "c", wait="5")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        django_rl.acquire("ten", "c", 11)  # a cost above the static limit


def test_redis_down_returns_the_degraded_decision_at_once(private_redis: Any) -> None:
    private_redis.stop()
    for name, allowed in (("closed", False), ("open", True)):
        started = time.monotonic()
        decision = django_rl.acquire(name, "c", wait=5)
        assert time.monotonic() - started < 1
        assert decision.degraded
        assert decision.allowed is allowed
    with pytest.raises(RateLimited):
        asyncio.run(_enter_async("closed"))


async def _enter_async(name: str) -> None:
    async with django_rl.limited(name, "c", wait=5):
        pass
