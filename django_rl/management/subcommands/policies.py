"""``ratelimit policies``: the configured policies, as a table."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_rl.conf import get_settings
from django_rl.exceptions import ConfigurationError
from django_rl.management.subcommands.output import table
from django_rl.policies import get_policy

HELP = "List the configured policies: algorithm, limit, identity, key fingerprint."


def add_arguments(parser: CommandParser) -> None:
    pass


def handle(command: BaseCommand, options: dict[str, Any]) -> None:
    settings = get_settings()
    rows = []
    for name, spec in sorted(settings.policies.items()):
        try:
            policy = get_policy(name)
        except ConfigurationError as exc:
            rows.append([name, "invalid", "", "", "", str(exc)])
            continue
        rows.append(
            [
                name,
                policy.algorithm.name,
                str(policy.limit),
                _rate(spec),
                str(spec.get("key", "user_or_ip")),
                policy.fingerprint,
            ]
        )
    command.stdout.write(
        f"KEY_PREFIX {settings.key_prefix!r}, CONNECTION {settings.connection!r}, "
        f"FAIL_OPEN {settings.fail_open}"
    )
    if not rows:
        command.stdout.write("No policies: define them in settings.DJANGO_RL['POLICIES'].")
        return
    header = ["policy", "algorithm", "limit", "rate", "key", "fingerprint"]
    command.stdout.write(table(header, rows, numeric=frozenset({2})))


def _rate(spec: Any) -> str:
    if "capacity" in spec:
        return f"refill {spec['rate']}"
    return str(spec.get("rate", ""))
