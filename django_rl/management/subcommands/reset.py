"""``ratelimit reset POLICY IDENTITY`` and ``ratelimit reset --all-policies IDENTITY``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_rl.core.keys import safe_identity
from django_rl.core.policies import policies_named
from django_rl.inspection import operator_identity, reset_everywhere

HELP = "Forget an identity's state under one policy, or under every policy with --all-policies."


def add_arguments(parser: CommandParser) -> None:
    parser.usage = "%(prog)s POLICY IDENTITY | %(prog)s --all-policies IDENTITY"
    parser.add_argument(
        "--all-policies", action="store_true", help="reset IDENTITY under every policy"
    )
    parser.add_argument("words", nargs="+", metavar="POLICY IDENTITY")


def handle(command: BaseCommand, options: dict[str, Any]) -> None:
    words = options["words"]
    if options["all_policies"]:
        if len(words) != 1:
            raise CommandError("reset --all-policies takes one IDENTITY (and no policy)")
        identity = operator_identity(words[0])
        deleted = reset_everywhere(identity)
        for name, count in deleted.items():
            command.stdout.write(f"{name}: {_keys(count)} deleted")
        command.stdout.write(
            f"Reset {safe_identity(identity)} under {len(deleted)} "
            f"polic{'y' if len(deleted) == 1 else 'ies'}: {_keys(sum(deleted.values()))} deleted."
        )
        return
    if len(words) != 2:
        raise CommandError("reset takes POLICY IDENTITY, or --all-policies IDENTITY")
    policies = policies_named(words[0])
    identity = operator_identity(words[1])
    count = sum(policy.reset(identity) for policy in policies)
    command.stdout.write(
        f"Reset {safe_identity(identity)} under {words[0]}: {_keys(count)} deleted."
    )


def _keys(count: int) -> str:
    return f"{count} key{'' if count == 1 else 's'}"
