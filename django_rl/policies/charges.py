"""``charge``'s points, counted after the response as ``penalize`` counts them.

One round trip each (``algorithms/points.lua``, through ``points.py``'s own
steps): ``points`` more for the hit's identity, at the rate and key the hit
was decided at, without refusing: the identity may go past its limit, and
its next hits are denied until time pays it back, each with the true
``Retry-After`` (fixed and sliding window: the window's count; sliding log:
one entry of ``points`` units; token bucket: tokens, below zero if need be;
GCRA: the theoretical arrival time pushed ``points`` intervals on).
Awaited on the event loop by :func:`acharge` (the same script). Redis
unable to answer: nothing charged (the node logs the outage once). Changes
no decision count.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from redis.exceptions import RedisError

from django_rl.algorithms.blocking import POINTS_SCRIPT, adrive, drive
from django_rl.backends.aio_node import arun, async_capable
from django_rl.policies.points import PENALIZE, _steps

if TYPE_CHECKING:
    from django_rl.backends.node import RedisNode
    from django_rl.policies.pending import Pending

logger = logging.getLogger("django_rl")


def _charge(node: RedisNode, key: str, algorithm: Any, points: int) -> Any:
    return drive(node, _steps(node, key, algorithm, PENALIZE, points), POINTS_SCRIPT)


async def _acharge(node: RedisNode, key: str, algorithm: Any, points: int) -> Any:
    return await adrive(node, _steps(node, key, algorithm, PENALIZE, points), POINTS_SCRIPT)


def charge(hit: Pending, points: int) -> bool:
    """Count ``points`` (at least 1) more for ``hit``'s identity; return whether Redis did."""
    try:
        hit.policy.backend.run(hit.key, _charge, hit.variant.algorithm, points)
    except RedisError as exc:
        logger.debug("could not charge %d point(s) after the response: %s", points, exc)
        return False
    return True


async def acharge(hit: Pending, points: int) -> bool:
    """:func:`charge`, awaited on the event loop (a backend without an async path: a thread)."""
    backend = hit.policy.backend
    try:
        if async_capable(backend):
            await arun(backend, hit.key, _acharge, hit.variant.algorithm, points)
        else:
            await sync_to_async(backend.run, thread_sensitive=False)(
                hit.key, _charge, hit.variant.algorithm, points
            )
    except RedisError as exc:
        logger.debug("could not charge %d point(s) after the response: %s", points, exc)
        return False
    return True
