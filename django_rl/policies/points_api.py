"""The module functions ``django_rl.penalize``, ``reward``, ``block``, ``unblock``.

``policy`` is a name or a :class:`~django_rl.policies.policy.Policy`; each
is the policy's method of the same name (``points.py``).
"""

from __future__ import annotations

from typing import Any

from django_rl.core.decision import Decision
from django_rl.policies.policy import Policy
from django_rl.policies.registry import get_policy


def _policy(policy: str | Policy) -> Policy:
    return policy if isinstance(policy, Policy) else get_policy(policy)


def penalize(
    policy: str | Policy, identity: str, points: int = 1, *, request: Any = None
) -> Decision:
    """Count ``points`` for ``identity`` without refusing (see :meth:`Policy.penalize`)."""
    return _policy(policy).penalize(identity, points, request=request)


def reward(
    policy: str | Policy, identity: str, points: int = 1, *, request: Any = None
) -> Decision:
    """Give ``identity`` back ``points``, never emptier than fresh (:meth:`Policy.reward`)."""
    return _policy(policy).reward(identity, points, request=request)


def block(policy: str | Policy, identity: str, seconds: float) -> Decision:
    """Deny ``identity`` for ``seconds`` from now (:meth:`Policy.block`)."""
    return _policy(policy).block(identity, seconds)


def unblock(policy: str | Policy, identity: str) -> bool:
    """End ``identity``'s block; ``False`` if there was none (:meth:`Policy.unblock`)."""
    return _policy(policy).unblock(identity)
