"""``ratelimit reset POLICY IDENTITY`` and ``ratelimit reset --all-policies IDENTITY``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_rl.core.keys import safe_identity
from django_rl.core.reprs import counted
from django_rl.inspection import identities_everywhere, operator_identity, reset_everywhere
from django_rl.policies.registry import policies_named

HELP = "Forget an identity's state under one policy, or under every policy with --all-policies."


def add_arguments(parser: CommandParser) -> None:
    parser.usage = "%(prog)s POLICY IDENTITY | %(prog)s --all-policies IDENTITY"
    parser.add_argument(
        "--all-policies", action="store_true", help="reset IDENTITY under every policy"
    )
    parser.add_argument("words", nargs="+", metavar="POLICY IDENTITY")


def handle(command: BaseCommand, options: dict[str, Any]) -> None:
    words = options["words"]
    try:
        if options["all_policies"]:
            if len(words) != 1:
                raise CommandError("reset --all-policies takes one IDENTITY (and no policy)")
            _reset_everywhere(command, words[0])
            return
        if len(words) != 2:
            raise CommandError("reset takes POLICY IDENTITY, or --all-policies IDENTITY")
        policies = policies_named(words[0])
        identity = operator_identity(words[1], policies[0].name)
    except ValueError as exc:  # a network, or an address the policy never counts by
        raise CommandError(str(exc)) from exc
    count = sum(policy.reset(identity) for policy in policies)
    command.stdout.write(
        f"Reset {safe_identity(identity)} under {words[0]}: {counted(count, 'key')} deleted."
    )


def _reset_everywhere(command: BaseCommand, text: str) -> None:
    """Reset ``text`` under every policy, each as it counts it; print each, then the sum."""
    # The identities as counted, for the summary (an address is ip:<address>
    # under most policies, grouped by each one's prefix).
    shown = sorted({safe_identity(who) for _, who in identities_everywhere(text)})
    deleted = reset_everywhere(text)
    for name, count in deleted.items():
        command.stdout.write(f"{name}: {counted(count, 'key')} deleted")
    command.stdout.write(
        f"Reset {', '.join(shown) or safe_identity(text)} under "
        f"{counted(len(deleted), 'policy', 'policies')}: "
        f"{counted(sum(deleted.values()), 'key')} deleted."
    )
