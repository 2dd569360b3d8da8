"""``ratelimit block / unblock / penalize / reward POLICY IDENTITY ...``: the Policy methods.

The identity as the other subcommands take it (an address is what requests
from it count as, ``ip:<address>``); each prints the identity's state after.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_rl.core.decision import Decision
from django_rl.core.keys import safe_identity
from django_rl.inspection import operator_identity
from django_rl.policies.policy import Policy
from django_rl.policies.registry import policies_named


def _target(options: dict[str, Any]) -> tuple[Policy, str]:
    try:
        policy = policies_named(options["policy"])[0]
        return policy, operator_identity(options["identity"], policy.name)
    except ValueError as exc:  # a network, or an address the policy never counts by
        raise CommandError(str(exc)) from exc


def _state(decision: Decision) -> str:
    if decision.degraded:
        return "Redis could not answer (degraded)"
    if decision.allowed:
        return f"allowed, {decision.remaining} of {decision.limit} left"
    return f"denied for {decision.retry_after:,.1f} s"


def _run(command: BaseCommand, what: str, options: dict[str, Any], amount: Any) -> None:
    policy, identity = _target(options)
    try:
        if what == "unblock":
            ended = policy.unblock(identity)
            command.stdout.write(
                f"{safe_identity(identity)} under {policy.name}: "
                + ("block ended." if ended else "was not blocked.")
            )
            return
        decision: Decision = getattr(policy, what)(identity, amount)
    except (TypeError, ValueError) as exc:
        raise CommandError(str(exc)) from exc
    command.stdout.write(f"{safe_identity(identity)} under {policy.name}: {_state(decision)}.")


def _subcommand(what: str, help_text: str, amount: str | None) -> Any:
    def add_arguments(parser: CommandParser) -> None:
        parser.add_argument("policy", metavar="POLICY")
        parser.add_argument("identity", metavar="IDENTITY")
        if amount == "seconds":
            parser.add_argument("amount", metavar="SECONDS", type=float)
        elif amount == "points":
            parser.add_argument("amount", metavar="POINTS", type=int, nargs="?", default=1)

    def handle(command: BaseCommand, options: dict[str, Any]) -> None:
        _run(command, what, options, options.get("amount"))

    return SimpleNamespace(HELP=help_text, add_arguments=add_arguments, handle=handle)


block = _subcommand("block", "Deny an identity under a policy for SECONDS.", "seconds")
unblock = _subcommand("unblock", "End an identity's block under a policy.", None)
penalize = _subcommand(
    "penalize", "Count POINTS (default 1) for an identity, past its limit if need be.", "points"
)
reward = _subcommand("reward", "Give an identity POINTS (default 1) back.", "points")
