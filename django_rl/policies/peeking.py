"""A policy's look at an identity's state, counting nothing (``Policy.peek``, ``apeek``).

The same selection step as a hit (``Policy._select``: an override, the
rate, an exemption), then the algorithm's ``peek`` on Redis (sync, or
awaited on the event loop), or the outage fallback's count when Redis
cannot answer; marked shadow as the policy's hits are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from redis.exceptions import RedisError

from django_rl.algorithms import Outcome, StaticAlgorithm
from django_rl.algorithms.base import apeek as apeek_algorithm
from django_rl.algorithms.quota import Periodic
from django_rl.backends.aio_node import arun, async_capable
from django_rl.core.decision import Decision
from django_rl.core.switches import LIMITS
from django_rl.policies import outcomes
from django_rl.policies.plans import Variant
from django_rl.policies.reporting import shadowed
from django_rl.policies.rollout import outside

if TYPE_CHECKING:
    from django_rl.policies.policy import Policy


def peek_identity(policy: Policy, identity: str, request: Any) -> Decision:
    """See :meth:`Policy.peek`."""
    selected = selection(policy, identity, request)
    if type(selected) is Variant:
        key = policy.variant_key(selected, identity)
        try:
            outcome = policy.backend.run(key, selected.algorithm.peek)
        except RedisError:
            outcome = None
        selected = peek_decision(policy, selected, identity, outcome)
    return peek_marked(policy, identity, selected)  # type: ignore[arg-type]  # a Decision


async def apeek_identity(policy: Policy, identity: str, request: Any) -> Decision:
    """See :meth:`Policy.apeek`: :func:`peek_identity`'s steps, the read awaited."""
    selected = selection(policy, identity, request)
    if type(selected) is Variant:
        key = policy.variant_key(selected, identity)
        try:
            if async_capable(policy.backend):
                outcome = await arun(policy.backend, key, apeek_algorithm, selected.algorithm)
            else:
                outcome = await sync_to_async(policy.backend.run, thread_sensitive=False)(
                    key, selected.algorithm.peek
                )
        except RedisError:
            outcome = None
        selected = peek_decision(policy, selected, identity, outcome)
    return peek_marked(policy, identity, selected)  # type: ignore[arg-type]  # a Decision


def selection(policy: Policy, identity: str, request: Any) -> Variant | Decision:
    """Step 1: the Decision made without Redis, or the Variant to read."""
    if LIMITS.off:
        return outcomes.no_limit(policy.name)
    selected = policy._select(identity, request, None, "peek")
    if selected is None:
        return outcomes.no_limit(policy.name)
    if type(selected) is Variant and isinstance(selected.algorithm, StaticAlgorithm):
        return outcomes.static(policy.name, selected, 1)
    return selected


def peek_marked(policy: Policy, identity: str, decision: Decision) -> Decision:
    """``decision`` marked shadow for a shadow policy, or an identity outside its percent."""
    if policy.shadow or (policy.partial and outside(policy, identity)):
        return shadowed(policy.name, identity, decision)
    return decision


def peek_decision(
    policy: Policy, variant: Variant, identity: str, outcome: Outcome | None
) -> Decision:
    """The Decision of a look's ``outcome`` (``None``: Redis could not answer)."""
    if outcome is None:
        if policy.fallback is not None:
            return policy.fallback.peek(identity)
        return outcomes.degraded(policy.name, variant, policy.fail_open)
    allowed, remaining, retry_ms, reset_ms = outcome
    return Decision(
        allowed, variant.limit, remaining, retry_ms / 1000, reset_ms / 1000, policy.name,
        False, outcome.window if type(outcome) is Periodic else variant.window,
    )  # fmt: skip
