"""Waiting instead of refusing: ``acquire``, ``aacquire`` and ``limited``.

For outbound calls and tasks that must stay under a limit across processes
(a provider's API, a shared resource): a hit, and while it is denied a
sleep until the Decision's ``retry_after`` and another hit, until one is
allowed or ``wait`` seconds have passed. Never a busy loop: each sleep lasts
at least the ``retry_after`` Redis (or the deny cache, without a round trip)
gave, so a waiting thread makes one hit per Retry-After. When the wait left
is shorter than the next ``retry_after``, the denied Decision is returned
at once. A degraded Decision (Redis could not answer) is returned at once.

Threads of one process waiting on one identity would all wake at the same
moment (a window's start) and each ask Redis; instead they take turns
(:func:`_turn`): one hit at a time per policy and identity, so once one is
denied the others are answered by the deny cache, without a round trip. A
turn is waited for at most :data:`TURN_WAIT` (a slow Redis never queues
them behind each other).

The steps are one generator (:func:`_pauses`), driven by a sync driver
(``time.sleep``, ``Policy.hit``) and an async one (``asyncio.sleep``,
``Policy.ahit``): ``aacquire`` never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
import weakref
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from types import TracebackType

from django_rl.core.decision import Decision
from django_rl.exceptions import RateLimited
from django_rl.leases import arelease, release
from django_rl.policies.registry import Policy, get_policy

__all__ = ["aacquire", "acquire", "limited"]

#: The shortest sleep between two hits: a denial whose ``retry_after`` is 0
#: (rounding) never turns into a busy loop.
MIN_PAUSE = 0.001

#: How long a thread waits for another's hit of the same policy and identity
#: to come back before it hits anyway. Short: it adds to the waiting thread's
#: lateness past its ``retry_after`` (16 threads waking at one window's start
#: on 2 cores: at most 6.5 ms late at 5 ms, 11-20 ms at 20 ms), and a few ms
#: already let the first hit's denial reach the deny cache for the others.
TURN_WAIT = 0.005

Pauses = Generator[float, Decision, Decision]


class _Turnstile:
    __slots__ = ("__weakref__", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()


#: A turnstile per (policy, identity) some thread is waiting on; gone with its last holder.
_turnstiles: weakref.WeakValueDictionary[tuple[str, str], _Turnstile] = (
    weakref.WeakValueDictionary()
)
_turnstiles_lock = threading.Lock()


@contextmanager
def _turn(policy: str, identity: str) -> Iterator[None]:
    """Hit in turn with this process's other threads acquiring ``identity``, waiting at most
    :data:`TURN_WAIT` for the one ahead."""
    with _turnstiles_lock:
        turnstile = _turnstiles.get((policy, identity))
        if turnstile is None:
            turnstile = _turnstiles[policy, identity] = _Turnstile()
    taken = turnstile.lock.acquire(timeout=TURN_WAIT)
    try:
        yield
    finally:
        if taken:
            turnstile.lock.release()


def _pauses(wait: float) -> Pauses:
    """Yield how long to sleep before each hit; sent each hit's Decision; return the last.

    The first pause is 0 (hit at once). After a denial, the next pause is
    its ``retry_after`` while the wait left allows it.
    """
    deadline = time.monotonic() + wait
    decision = yield 0.0
    while decision.denies and not decision.degraded:
        pause = max(decision.retry_after, MIN_PAUSE)
        if pause > deadline - time.monotonic():
            break  # the wait left is shorter than the next chance: no sleep
        decision = yield pause
    return decision


def _checked_wait(wait: float) -> float:
    if isinstance(wait, bool) or not isinstance(wait, int | float):
        raise TypeError(f"wait must be a number of seconds, not {type(wait).__name__}")
    if not wait >= 0 or math.isinf(wait):  # NaN fails the first test
        raise ValueError(f"wait must be a finite number of seconds >= 0, not {wait!r}")
    return float(wait)


def _policy(policy: Policy | str) -> Policy:
    return get_policy(policy) if isinstance(policy, str) else policy


def acquire(policy: Policy | str, identity: str, cost: int = 1, *, wait: float = 0.0) -> Decision:
    """Hit ``policy`` for ``identity``; while denied, sleep ``retry_after`` and hit again.

    Returns the last Decision: allowed, or denied when ``wait`` seconds would
    run out before the next chance (returned at once, without sleeping), or
    degraded (Redis could not answer: at once, per ``fail_open`` /
    ``fallback_rate``). ``wait=0`` is one hit. For outbound calls and tasks,
    never for a sync view (it holds the worker while it sleeps).

    :param policy: a policy or its name.
    :raises ConfigurationError: for a name that is not a valid policy.
    :raises ValueError: for a cost above a static limit, or a negative ``wait``.
    """
    chosen = _policy(policy)
    steps = _pauses(_checked_wait(wait))
    pause = next(steps)
    try:
        while True:
            if pause:
                time.sleep(pause)
            with _turn(chosen.name, identity):
                decision = chosen.hit(identity, cost)
            pause = steps.send(decision)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def aacquire(
    policy: Policy | str, identity: str, cost: int = 1, *, wait: float = 0.0
) -> Decision:
    """:func:`acquire` on the event loop: ``Policy.ahit`` and ``asyncio.sleep``, no thread."""
    chosen = _policy(policy)
    steps = _pauses(_checked_wait(wait))
    pause = next(steps)
    try:
        while True:
            if pause:
                await asyncio.sleep(pause)
            pause = steps.send(await chosen.ahit(identity, cost))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


class limited:  # a lower-case name: used as a function, ``with django_rl.limited(...)``
    """``with limited(policy, identity, wait=5):`` (or ``async with``): wait for a hit, or raise.

    Enters with the allowed Decision (:func:`acquire`, or :func:`aacquire`
    for ``async with``); raises :class:`~django_rl.exceptions.RateLimited`
    (carrying the denied Decision) when ``wait`` runs out first. A
    ``concurrency`` policy's slots are given back when the block ends. A
    degraded Decision that fails open enters; one that fails closed raises.
    """

    def __init__(
        self, policy: Policy | str, identity: str, cost: int = 1, *, wait: float = 0.0
    ) -> None:
        self.policy = policy
        self.identity = identity
        self.cost = cost
        self.wait = _checked_wait(wait)
        self.decision: Decision | None = None

    def _entered(self, decision: Decision) -> Decision:
        if decision.denies:
            raise RateLimited(decision)
        self.decision = decision
        return decision

    def __enter__(self) -> Decision:
        return self._entered(acquire(self.policy, self.identity, self.cost, wait=self.wait))

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.decision is not None and self.decision.lease is not None:
            release(self.decision)

    async def __aenter__(self) -> Decision:
        decision = await aacquire(self.policy, self.identity, self.cost, wait=self.wait)
        return self._entered(decision)

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.decision is not None and self.decision.lease is not None:
            await arelease(self.decision)
