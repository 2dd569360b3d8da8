"""What a policy's Decisions tell the rest of the process: shadow marks, metrics, history, denials.

Every Decision a policy makes goes through here once: :func:`shadowed` for
a policy in shadow mode, then counted in the metrics and the admin's history
(``Policy.report``, or :func:`report_requests` for a request's several
policies), and a request's denials reported (the ``rate_limited`` signal,
the ``django_rl.denials`` log: ``observability/denials.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from django_rl.core.decision import Decision
from django_rl.observability.denials import areport_denial, report_denial
from django_rl.observability.history import RECORDER, field_of
from django_rl.observability.metrics import count_decisions
from django_rl.overrides.loader import rules_for
from django_rl.overrides.rules import BLOCK
from django_rl.policies import operator_blocks
from django_rl.policies.rollout import outside

if TYPE_CHECKING:
    from django_rl.policies.policy import Policy


def shadowed(name: str, identity: str, decision: Decision, also: str | None = None) -> Decision:
    """Return ``decision`` of a policy in shadow mode marked ``shadow=True``.

    Except an operator's block (an override of ``identity``, or of ``also``;
    ``block()``: ``operator_blocks.py``): it is enforced in every mode, shadow
    and ``SHADOW`` included.
    """
    if not decision.allowed:
        if operator_blocks.blocked(name, identity):
            return decision
        rules = rules_for(name)
        rule = rules.match(identity) if rules is not None else None
        if rule is None and rules is not None and also is not None:
            rule = rules.match(also)
        if rule is not None and rule.action == BLOCK:
            return decision
    return replace(decision, shadow=True)


def report_requests(
    request: Any, reported: Sequence[tuple[Policy, str, Decision]]
) -> list[Decision]:
    """Return each ``(policy, identity, decision)``'s Decision reported, in order.

    As :meth:`Policy.hit_request` reports each, for the Decisions of one request
    of several policies: counted in the metrics and the history together
    (one lock each, one clock read), then each denial reported.
    """
    decisions = _counted(reported)
    for (policy, identity, _), decision in zip(reported, decisions, strict=True):
        if not decision.allowed:
            report_denial(request, policy.name, identity, decision)
    return decisions


async def areport_requests(
    request: Any, reported: Sequence[tuple[Policy, str, Decision]]
) -> list[Decision]:
    """:func:`report_requests` on the event loop (denials: ``areport_denial``)."""
    decisions = _counted(reported)
    for (policy, identity, _), decision in zip(reported, decisions, strict=True):
        if not decision.allowed:
            await areport_denial(request, policy.name, identity, decision)
    return decisions


def _counted(reported: Sequence[tuple[Policy, str, Decision]]) -> list[Decision]:
    """Return the Decisions marked for shadow mode, counted in the metrics and history."""
    decisions = [
        shadowed(policy.name, identity, decision)
        if policy.shadow or (policy.partial and outside(policy, identity))  # (rollout.py)
        else decision
        for policy, identity, decision in reported
    ]
    count_decisions(
        [(policy.name, d) for (policy, _, _), d in zip(reported, decisions, strict=True)]
    )
    RECORDER.count_many(
        [
            (policy.name, "a" if d.allowed else field_of(d), identity)
            for (policy, identity, _), d in zip(reported, decisions, strict=True)
        ]
    )
    return decisions
