"""``ratelimit policies``: every policy (settings, code, inline, drop-ins), as a table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_rl.conf import get_settings
from django_rl.contrib import dropin_policies
from django_rl.exceptions import ConfigurationError
from django_rl.management.subcommands.output import table
from django_rl.policies.inline import url_specs
from django_rl.policies.plans import function_label
from django_rl.policies.registry import (
    Policy,
    get_policy,
    inline_policy,
    registered_policies,
)

HELP = (
    "List the policies (of settings, of register_policy, inline ones of the URLconf's "
    "views, and the drop-ins'): algorithm, limit, rate, identity, key fingerprint."
)


def add_arguments(parser: CommandParser) -> None:
    pass


def handle(command: BaseCommand, options: dict[str, Any]) -> None:
    settings = get_settings()
    rows = []
    specs = {**registered_policies(), **settings.policies}
    for name, spec in sorted(specs.items()):
        try:
            rows.append(_row(get_policy(name), spec))
        except ConfigurationError as exc:
            rows.append([name, "invalid", "", "", "", str(exc)])
    inline = sorted(url_specs().items(), key=lambda item: (item[0].name, item[0].rate_text))
    for spec, _ in inline:
        try:
            rows.append(_row(inline_policy(spec), spec.policy_spec()))
        except ConfigurationError as exc:
            rows.append([spec.name, "invalid", "", "", "", str(exc)])
    for policy in sorted(dropin_policies(), key=lambda p: (p.name, p.rate)):
        if policy.name in specs:
            continue
        if policy.per_request:
            # django-ratelimit's: a rate per call, each its own state.
            rates = ", ".join(sorted(v.rate for v in policy.variants())) or "per call"
            rows.append([policy.name, "fixed_window", "per rate", rates, "its own", "per rate"])
        else:
            rows.append(_row(policy, {"key": "drop-in"}))
    command.stdout.write(
        f"KEY_PREFIX {settings.key_prefix!r}, CONNECTION {settings.connection!r}, "
        f"FAIL_OPEN {settings.fail_open}"
    )
    if not rows:
        command.stdout.write("No policies: define them in settings.DJANGO_RL['POLICIES'].")
        return
    header = ["policy", "algorithm", "limit", "rate", "key", "fingerprint"]
    command.stdout.write(table(header, rows, numeric=frozenset({2})))
    for spec, views in inline:
        command.stdout.write(f"{spec.name} ({spec.rate_text}): @ratelimit on {', '.join(views)}")


def _row(policy: Policy, spec: Mapping[str, Any]) -> list[str]:
    key = spec.get("key", "user_or_ip")
    key_text = key if isinstance(key, str) else function_label(key)
    if policy.per_request:
        return [policy.name, str(spec["algorithm"]), "per rate", policy.rate, key_text, "per rate"]
    rate = f"refill {policy.rate}" if "capacity" in spec else policy.rate
    return [
        policy.name,
        policy.algorithm.name,
        str(policy.limit),
        rate,
        key_text,
        policy.fingerprint,
    ]
