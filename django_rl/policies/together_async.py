"""Several policies' hits decided together, awaited on the event loop (``together.py``'s twin).

The same steps, scripts and Decisions as ``together.py``: every step but the
exchange is ``together.py``'s own (the preparation of the hits, the grouping
by slot, ``together._script_steps`` for one slot's script and its attempts,
``together.across_steps`` for several slots' reserve and refund); here only
the drivers that await the exchanges (``backends/aio_node.py``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from redis.exceptions import RedisError

from django_rl.algorithms import Outcome
from django_rl.backends.aio_node import aeval, arun, async_capable
from django_rl.observability.metrics import metrics
from django_rl.policies.policy import Pending, Policy
from django_rl.policies.together import (
    REFUND,
    SCRIPT,
    _Call,
    _in_order,
    _merge,
    _one_slot,
    _script_steps,
    across_steps,
    by_slot,
    decide,
    refund_arguments,
    refunded,
    split,
)

if TYPE_CHECKING:
    from django_rl.backends import RedisNode
    from django_rl.core.decision import Decision


async def adecide(
    made: Sequence[tuple[Policy, Pending | Decision]], kept: list[_Call] | None = None
) -> list[Decision]:
    """``together.decide``, awaited on the event loop: the same steps, scripts and Decisions."""
    pending, vetoed = split(made)
    if not pending:
        return [m for _, m in made]  # type: ignore[misc]  # no Pending: all Decisions
    merged = _merge(pending)
    if not all(async_capable(hit.policy.backend) for hit in merged):
        return await sync_to_async(decide, thread_sensitive=False)(made, kept)
    if len(merged) == 1 and not vetoed and kept is None:
        answers = {merged[0].key: await merged[0].policy.aask(merged[0])}
    else:
        answers = await _adecide_merged(merged, count=not vetoed, kept=kept)
    return _in_order(made, answers)


async def _adecide_merged(
    merged: list[Pending], *, count: bool, kept: list[_Call] | None = None
) -> dict[str, Decision]:
    """``together._decide_merged``, awaited."""
    if _one_slot(merged):
        return await _adecide_group(merged, count=count, kept=kept)
    groups = by_slot(merged)
    if not count:
        answers: dict[str, Decision] = {}
        for group in groups:
            answers.update(await _adecide_group(group, count=count))
        return answers
    return await _adecide_across(groups, kept)


async def _adecide_group(
    group: list[Pending], *, count: bool, kept: list[_Call] | None = None
) -> dict[str, Decision]:
    """``together._decide_group``, awaited."""
    try:
        call = await _acall(group, count=count)
    except RedisError:
        return {hit.key: hit.policy.unanswered(hit) for hit in group}
    if kept is not None and call.counted:
        kept.append(call)
    return call.answers(counted=call.counted)


async def _acall(group: list[Pending], *, count: bool) -> _Call:
    """``together._call``, awaited; then what answering would ask of Redis, awaited too."""
    first = group[0]
    measured = metrics()
    began = time.perf_counter()
    call = await arun(first.policy.backend, first.key, _arun_script, group, count)
    if measured is not None:
        measured.pending.observe(time.perf_counter() - began)
    for hit, outcome in zip(group, call.outcomes, strict=True):
        waiting = hit.policy.abefore_answer(hit, outcome)
        if waiting is not None:
            await waiting
    return call


async def _arun_script(
    node: RedisNode, first_key: str, group: Sequence[Pending], count: bool
) -> _Call:
    """``together.run_script``, awaited: the same steps, the same script and ARGV."""
    steps = _script_steps(node, group, count)
    try:
        exchange = next(steps)
        while True:
            keys, head, segments = exchange
            argv = [*head, *(arg for segment in segments for arg in segment)]
            exchange = steps.send(await aeval(node, SCRIPT, keys, argv))
    except StopIteration as done:
        call: _Call = done.value
        return call


async def arefund(node: RedisNode, first_key: str, call: _Call) -> list[Outcome]:
    """``together.refund``, awaited (the same ``refund.lua`` and arguments)."""
    keys, argv = refund_arguments(node, call)
    sent = time.monotonic()
    replies = await aeval(node, REFUND, keys, argv)
    return refunded(node, call, replies, sent, time.monotonic())


async def _adecide_across(
    groups: list[list[Pending]], kept: list[_Call] | None = None
) -> dict[str, Decision]:
    """``together._decide_across``, awaited: its steps (``across_steps``) driven here."""
    steps = across_steps(groups, kept)
    try:
        step = next(steps)
        while True:
            kind, argument = step
            if kind == "look":
                step = steps.send(await _adecide_group(argument, count=False))
                continue
            try:
                if kind == "count":
                    result: Any = await _acall(argument, count=True)
                else:  # "refund"
                    first = argument.group[0]
                    result = await arun(first.policy.backend, first.key, arefund, argument)
            except RedisError as exc:
                result = exc
            step = steps.send(result)
    except StopIteration as done:
        answers: dict[str, Decision] = done.value
        return answers
