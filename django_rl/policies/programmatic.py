"""Hits from code outside views: ``hit_many`` and ``ahit_many``.

Several ``(policy, identity, cost)`` hits decided together, all or nothing,
by the same steps as a request's several policies (``Policy.prepare``, then
``together.py``), reported as every decision is.
"""

from __future__ import annotations

from collections.abc import Iterable

from django_rl.core.decision import Decision
from django_rl.core.switches import LIMITS
from django_rl.policies import together, together_async
from django_rl.policies.policy import Pending, Policy
from django_rl.policies.registry import get_policy


def hit_many(hits: Iterable[tuple[Policy | str, str, int]]) -> list[Decision]:
    """Count several hits together, all or nothing; return a Decision for each, in order.

    Each hit is ``(policy or its name, identity, cost)``. When any policy
    denies its hit, no hit is counted, and every Decision reports its
    policy's state without its hit (``allowed``: whether that policy alone
    would have allowed it); when none denies, every hit is counted. One
    round trip where the keys share a slot (one server, Sentinel, or one
    identity's keys on a cluster); across slots, see ``together.py``. Two
    hits of one policy and identity count as one of their summed cost.

    For code outside views; a per-plan policy (a rate function) cannot be
    hit here (``TypeError``: it needs a request). Never raises for Redis
    trouble: degraded Decisions, as :meth:`Policy.hit`. While limits are off
    (``rate_limits_disabled``): each hit's no-limit Decision (allowed,
    ``limit`` 0), nothing counted, no Redis.

    :raises ConfigurationError: for a name that is not a valid policy.
    :raises ValueError: for a cost that is not a whole number from 1 to its limit.
    """
    made = _prepared(hits)
    if LIMITS.off:  # rate_limits_disabled: each a no-limit Decision, nothing counted
        return [m for _, _, m in made]  # type: ignore[misc]  # Policy._decide made no Pending
    return _reported(made, together.decide([(policy, m) for policy, _, m in made]))


async def ahit_many(hits: Iterable[tuple[Policy | str, str, int]]) -> list[Decision]:
    """:func:`hit_many`, awaited on the event loop: the same steps, scripts and Decisions.

    :raises ConfigurationError: as :func:`hit_many`.
    :raises ValueError: as :func:`hit_many`.
    """
    listed = list(hits)
    for policy_or_name, _, _ in listed:
        policy = get_policy(policy_or_name) if isinstance(policy_or_name, str) else policy_or_name
        waiting = policy.aready()
        if waiting is not None:
            await waiting
    made = _prepared(listed)
    if LIMITS.off:  # rate_limits_disabled: as hit_many
        return [m for _, _, m in made]  # type: ignore[misc]  # Policy._decide made no Pending
    return _reported(made, await together_async.adecide([(policy, m) for policy, _, m in made]))


Prepared = list[tuple[Policy, str, "Pending | Decision"]]


def _prepared(hits: Iterable[tuple[Policy | str, str, int]]) -> Prepared:
    made: Prepared = []
    for policy_or_name, identity, cost in hits:
        policy = get_policy(policy_or_name) if isinstance(policy_or_name, str) else policy_or_name
        made.append((policy, identity, policy.prepare(identity, cost)))
    return made


def _reported(made: Prepared, decided: list[Decision]) -> list[Decision]:
    return [
        policy.report(identity, decision)
        for (policy, identity, _), decision in zip(made, decided, strict=True)
    ]
