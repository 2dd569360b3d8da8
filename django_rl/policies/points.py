"""Points and blocks set by code: ``penalize``, ``reward``, ``block``, ``unblock``.

Each is one round trip (``algorithms/points.lua``, atomic: exact under any
number of concurrent callers) on the node that owns the identity's key, at
the rate a hit would be decided at (``Policy._select``: an override's rate,
a per-plan rate). They answer the identity's state afterwards as ``peek``
does (``unblock``: whether a block ended). Redis unable to answer: the
Decision ``peek`` gives then (degraded; ``unblock``: ``False``), the outage
logged by the node as for decisions.

``block`` applies to every policy but a ``concurrency`` one: on a policy
without ``block_for`` or ``escalate`` it also switches the policy's
decisions to reading blocks, here at once and in other processes within
about a second (``block_reading.py``; on a Redis Cluster, one more round
trip for the mark).

Also the policy's part of a denial (:func:`denied`): the deny cache
remembers it (with ``escalate``, only a blocked identity's), and a block
that starts sends ``identity_blocked``.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from django_rl.algorithms import Outcome
from django_rl.algorithms.blocking import (
    BLOCK_SUFFIX,
    BLOCKABLE,
    MAX_ATTEMPTS,
    POINTS_SCRIPT,
    Blocking,
    BlockOutcome,
    Uncounted,
    drive,
)
from django_rl.backends.clock import ClockError
from django_rl.backends.node import RedisNode
from django_rl.core.decision import Decision
from django_rl.observability.denials import report_block
from django_rl.policies import block_reading, operator_blocks, reset_epoch
from django_rl.policies.peeking import peek_decision, peek_marked, selection
from django_rl.policies.plans import Variant

if TYPE_CHECKING:
    from django_rl.policies.pending import Pending
    from django_rl.policies.policy import Policy

PENALIZE, REWARD, BLOCK, UNBLOCK = "p", "r", "b", "u"


class PointsMixin:
    """:class:`~django_rl.policies.policy.Policy`'s ``penalize``, ``reward``, ``block``,
    ``unblock``: see the module and ``docs/algorithms.md``."""

    def penalize(self, identity: str, points: int = 1, *, request: Any = None) -> Decision:
        """Count ``points`` for ``identity`` without refusing; return its state after."""
        return change(self, identity, PENALIZE, points, request)[1]  # type: ignore[arg-type]

    def reward(self, identity: str, points: int = 1, *, request: Any = None) -> Decision:
        """Give ``identity`` back ``points`` (never emptier than fresh); return its state after."""
        return change(self, identity, REWARD, points, request)[1]  # type: ignore[arg-type]

    def block(self, identity: str, seconds: float) -> Decision:
        """Deny ``identity`` for ``seconds`` from now; return its state after."""
        return change(self, identity, BLOCK, seconds, None)[1]  # type: ignore[arg-type]

    def unblock(self, identity: str) -> bool:
        """End ``identity``'s block; ``False`` if there was none (or Redis cannot answer)."""
        return change(self, identity, UNBLOCK, 0, None)[0] == 1  # type: ignore[arg-type]


def checked_points(points: object) -> int:
    """Return ``points`` if a whole number of at least 1.

    :raises TypeError: not an ``int`` (a ``bool`` included).
    :raises ValueError: below 1.
    """
    if type(points) is not int:
        raise TypeError(f"points must be an int, not {type(points).__name__}")
    if points < 1:
        raise ValueError(f"points must be at least 1, not {points}")
    return points


def checked_seconds(seconds: object) -> int:
    """Return ``seconds`` (a positive number, at most a year) in ms."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"seconds must be a number, not {type(seconds).__name__}")
    if not 0 < seconds <= 366 * 86_400:
        raise ValueError(f"seconds must be above 0 and at most a year, not {seconds!r}")
    return max(1, round(seconds * 1000))


def change(
    policy: Policy, identity: str, op: str, amount: float, request: Any
) -> tuple[int, Decision]:
    """Make the change ``op`` (:data:`PENALIZE`, ...); return its answer and the state after.

    :raises TypeError: for a ``concurrency`` policy, or a bad ``points``.
    :raises ValueError: for ``points`` below 1.
    """
    _refuse_concurrency(policy, None)
    if op in (PENALIZE, REWARD):
        amount = checked_points(amount)
    elif op == BLOCK:
        amount = checked_seconds(amount)
    if op == BLOCK:
        # Before the block is written: this process's next decision reads it.
        block_reading.note(policy.name, amount / 1000)
        policy.read_blocks()  # (also a policy made by hand, which the registry never built)
    selected = selection(policy, identity, request)
    if type(selected) is not Variant:  # no limit, a static rate, an override's block
        return 0, peek_marked(policy, identity, selected)  # type: ignore[arg-type]
    _refuse_concurrency(policy, selected)
    algorithm = selected.algorithm
    mark = None
    own = algorithm.blocks if isinstance(algorithm, Blocking) else None
    if op in (BLOCK, UNBLOCK) and (own is None or own is block_reading.NO_BLOCKS):
        # A policy without block_for or escalate: a block set here or elsewhere is in
        # the identity's block hash all the same, and a block marks the policy for the
        # other processes (block_reading.py).
        if own is None:
            algorithm = Blocking(algorithm, block_reading.NO_BLOCKS)  # type: ignore[assignment]
        if op == BLOCK:
            mark = block_reading.mark_key(policy.key_prefix), policy.name
    # One server (maybe Sentinel's): the mark in the block's own script; a cluster's apart.
    together = isinstance(policy.backend, RedisNode)
    key = policy.variant_key(selected, identity)
    try:
        answer, outcome = policy.backend.run(
            key, _run, algorithm, op, int(amount), mark if together else None
        )
    except RedisError:
        answer, outcome = 0, None  # the node logged the outage, as for a decision
    if mark is not None and answer > 0 and not together:
        _mark_elsewhere(policy, mark, answer)
    if outcome is not None and (op == REWARD or (op == UNBLOCK and answer)):
        _forget(policy, key)  # a remembered denial may no longer hold
    if op == BLOCK and answer > 0:
        operator_blocks.note(policy.name, identity, answer / 1000)
        report_block(request, policy.name, identity, answer / 1000)
    elif op == UNBLOCK and answer:
        operator_blocks.forget(policy.name, identity)
    return answer, peek_marked(policy, identity, peek_decision(policy, selected, identity, outcome))


def _mark_elsewhere(policy: Policy, mark: tuple[str, str], ms: int) -> None:
    """Write the mark on its own node: a Redis Cluster's mark lives apart from the block."""
    key, name = mark
    # Redis unable to answer: the node logged it; other processes read the block once
    # their policy reads blocks (a later block's mark, or a restart).
    with contextlib.suppress(RedisError):
        policy.backend.run(key, block_reading.write_mark, name, ms)


def _refuse_concurrency(policy: Policy, variant: Variant | None) -> None:
    variants = [variant] if variant is not None else policy.variants()
    for each in variants:
        if each.algorithm.name == "concurrency":
            raise TypeError(
                f"policy {policy.name!r} is a concurrency policy: it holds slots, not points; "
                "penalize, reward, block and unblock apply to the other algorithms"
            )


def _forget(policy: Policy, key: str) -> None:
    """Forget ``key``'s remembered denial here, and in other processes within a second."""
    if policy.denials is not None:
        policy.denials.forget(key)
    # Redis unable to answer: the node logged it; other processes' entries end by themselves.
    with contextlib.suppress(RedisError):
        reset_epoch.bump()


def _run(
    node: RedisNode, key: str, algorithm: Any, op: str, amount: int, mark: tuple[str, str] | None
) -> tuple[int, Outcome]:
    return drive(node, _steps(node, key, algorithm, op, amount, mark), POINTS_SCRIPT)  # type: ignore[no-any-return]


def _steps(
    node: RedisNode,
    key: str,
    algorithm: Any,
    op: str,
    amount: int,
    mark: tuple[str, str] | None = None,
) -> Any:
    """The points script's steps; ``mark`` (its key, the policy's name): a block marks it."""
    blocking = isinstance(algorithm, Blocking)
    inner = algorithm.inner if blocking else algorithm
    if inner.name not in BLOCKABLE:
        raise TypeError(f"{inner.name} keeps no points")
    for attempt in range(MAX_ATTEMPTS):
        keys, parameters = inner.script_entry(node, key)
        argv: list[int | str] = [node.script_time(), op, amount, inner.name, len(keys)]
        if mark is not None:
            keys = [*keys, key + BLOCK_SUFFIX, mark[0]]
            argv += ["m", *algorithm.blocks.arguments, mark[1], int(block_reading.SLACK_S * 1000)]
        elif blocking:
            keys = [*keys, key + BLOCK_SUFFIX]
            argv += ["1", *algorithm.blocks.arguments]
        else:
            argv.append("0")
        argv += parameters
        sent = time.monotonic()
        reply = yield keys, (tuple(argv), ())
        outcome = algorithm.script_outcome(node, reply[1:], sent, time.monotonic())
        if reply[0] != -1 and outcome is not None:
            return int(reply[0]), outcome
        if attempt and not node.app_clock:
            node.clock.resync()
    raise ClockError(
        f"no current window found on the Redis server's clock in {MAX_ATTEMPTS} attempts"
    )


def denied(policy: Policy, pending: Pending, outcome: Outcome, decision: Decision) -> None:
    """A denial Redis answered: the deny cache remembers it, and a block that starts is reported.

    With ``escalate`` only a blocked identity's denial is remembered
    (``Uncounted``): every other denial must reach Redis, where it counts.
    """
    algorithm = pending.variant.algorithm
    kind = type(outcome)
    if (
        policy.denials is not None
        and pending.asked_at  # 0.0: not asked of the deny cache (a given time)
        and kind is not Uncounted
        and getattr(algorithm, "cache_denials", True)
        # count_when's give-backs may end a denial early: only a block is remembered.
        and (not policy.gives_back or kind is BlockOutcome)
    ):
        # (A block's denial too: its Retry-After may be the algorithm's wait for this cost.)
        any_cost = algorithm.denial_holds_for_any_cost
        policy.denials.remember(
            pending.key, decision, pending.cost, pending.asked_at, any_cost=any_cost
        )
    if policy.shadow or policy.partial:  # (they mark Decisions shadow: reporting.shadowed)
        if kind is BlockOutcome and outcome.operator:  # type: ignore[attr-defined]
            operator_blocks.note(policy.name, pending.identity, decision.retry_after)
        else:
            operator_blocks.forget(policy.name, pending.identity)
    if kind is BlockOutcome and outcome.started_ms:  # type: ignore[attr-defined]
        seconds = outcome.started_ms / 1000  # type: ignore[attr-defined]
        report_block(pending.request, policy.name, pending.identity, seconds)
