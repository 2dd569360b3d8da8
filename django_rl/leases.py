"""Giving back the slots of ``concurrency`` hits.

A ``concurrency`` hit that is allowed (and counted: when several policies
decide a request together and one denies, none counts, and no slot is taken)
holds ``cost`` slots until they are given back, or until the policy's
``timeout`` ends them. Its Decision carries a :class:`Lease`
(``Decision.lease``); :func:`release` gives it back.

* ``@ratelimit``, ``PolicyThrottle`` and ``@ratelimit`` on DRF views hold
  them until the request is done: when Django closes the view's response,
  or the response it sent instead (a 304, a cached copy), or gives up the
  request (an ASGI client that disconnected); at once when the view raises.
  See ``http/slots.py``.
* Code outside views: ``with holding(policy.hit(identity)) as decision:``,
  or ``release(decision)`` in a ``finally``.

:func:`release` never raises for Redis trouble: a lease that cannot be given
back ends by itself at the policy's ``timeout`` (the node logs the outage or
error reply once, as for decisions).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from asgiref.sync import sync_to_async
from redis.exceptions import RedisError

from django_rl.algorithms.concurrency import members
from django_rl.backends.aio_node import apipeline, arun, async_capable
from django_rl.core.decision import Decision

if TYPE_CHECKING:
    from django_rl.backends import Backend, RedisNode

logger = logging.getLogger("django_rl")

#: Claims leases to give back: two threads ending one request give each back once.
_claiming = threading.Lock()


class Lease:
    """The slots one ``concurrency`` hit took: its key, token and cost, and where they live.

    Given back at most once (:meth:`release` marks it, even when Redis could
    not answer: the lease then ends at its timeout).
    """

    __slots__ = ("backend", "cost", "key", "policy", "released", "token")

    def __init__(self, backend: Backend, key: str, token: str, cost: int, policy: str) -> None:
        self.backend = backend
        self.key = key
        self.token = token
        self.cost = cost
        self.policy = policy
        self.released = False

    def __repr__(self) -> str:
        state = "released" if self.released else "held"
        return f"<Lease of {self.cost} slot(s) of policy {self.policy!r}, {state}>"

    def members(self) -> list[str]:
        """Return the ZSET members of its slots (as ``concurrency.lua`` names them)."""
        return members(self.token, self.cost)


#: Decisions (or leases) whose slots to give back: one, or several.
Held = Decision | Lease | Iterable[Decision | Lease | None] | None
T = TypeVar("T", bound=Held)


def held(decisions: Held) -> list[Lease]:
    """Return the leases of ``decisions`` not yet given back, each once."""
    if decisions is None:
        return []
    if isinstance(decisions, (Decision, Lease)):
        decisions = (decisions,)
    found: dict[int, Lease] | None = None  # made only for a lease: most requests hold none
    for item in decisions:
        lease = item.lease if isinstance(item, Decision) else item
        if lease is not None and not lease.released:
            if found is None:
                found = {}
            found[id(lease)] = lease
    return [] if found is None else list(found.values())


def release(decisions: Held) -> int:
    """Give back the slots of ``decisions`` (Decisions, Leases, or one of either); return how many.

    One round trip per hash slot (one per request on a single server or
    Sentinel: a request's leases share its identity's slot). Decisions
    without a lease (another algorithm, a denied or uncounted hit, a
    degraded one) and leases already given back are skipped. Never raises
    for Redis trouble: those slots end at their policy's ``timeout``.
    """
    given = 0
    for group in _claimed(decisions):
        try:
            group[0].backend.run(group[0].key, _give_back, group)
        except RedisError as exc:
            _not_given_back(group, exc)
            continue
        given += sum(lease.cost for lease in group)
    return given


async def arelease(decisions: Held) -> int:
    """:func:`release`, awaited on the event loop: the same claims and ZREMs."""
    given = 0
    for group in _claimed(decisions):
        backend = group[0].backend
        try:
            if async_capable(backend):
                await arun(backend, group[0].key, _agive_back, group)
            else:  # (a backend without an async path)
                await sync_to_async(backend.run, thread_sensitive=False)(
                    group[0].key, _give_back, group
                )
        except RedisError as exc:
            _not_given_back(group, exc)
            continue
        given += sum(lease.cost for lease in group)
    return given


def _claimed(decisions: Held) -> list[list[Lease]]:
    """Claim the leases of ``decisions`` not given back yet; return them by hash slot."""
    leases = held(decisions)
    if not leases:
        return []
    with _claiming:
        leases = [lease for lease in leases if not lease.released]
        for lease in leases:
            lease.released = True
    groups: dict[tuple[int, int], list[Lease]] = {}
    for lease in leases:
        backend = lease.backend
        groups.setdefault((id(backend), backend.slot_of(lease.key)), []).append(lease)
    return list(groups.values())


def _not_given_back(group: list[Lease], exc: RedisError) -> None:
    # The node logged the outage or error reply once; the lease ends by its timeout.
    logger.debug("could not give back %d lease(s): %s", len(group), exc)


def _zrems(leases: list[Lease]) -> Callable[[Any], list[Any]]:
    # ZREM may run twice (a retried pipeline): the second removes nothing.
    return lambda pipe: [pipe.zrem(lease.key, *lease.members()) for lease in leases]


def _give_back(node: RedisNode, key: str, leases: list[Lease]) -> None:
    node.pipeline(_zrems(leases))


async def _agive_back(node: RedisNode, key: str, leases: list[Lease]) -> None:
    await apipeline(node, _zrems(leases))


@contextmanager
def holding(decisions: T) -> Iterator[T]:
    """Give back the slots of ``decisions`` when the block ends, however it ends.

    ``with holding(policy.hit(identity)) as decision: if decision.allowed: ...``
    """
    try:
        yield decisions
    finally:
        release(decisions)
