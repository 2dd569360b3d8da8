"""The subcommands of ``manage.py ratelimit``, one module each.

A subcommand module has ``HELP`` (one line), ``add_arguments(parser)`` and
``handle(command, options)``, which writes to ``command.stdout`` and raises
``CommandError``, ``ConfigurationError`` or ``BackendError`` on failure. Add
one by writing its module and listing it in :data:`SUBCOMMANDS`.
"""

from __future__ import annotations

from typing import Any, Protocol

from django.core.management.base import BaseCommand, CommandParser

from django_rl.management.subcommands import demo, inspect, points, policies, reset, top


class Subcommand(Protocol):
    HELP: str

    def add_arguments(self, parser: CommandParser) -> None: ...

    def handle(self, command: BaseCommand, options: dict[str, Any]) -> None: ...


SUBCOMMANDS: dict[str, Subcommand] = {
    "policies": policies,
    "inspect": inspect,
    "reset": reset,
    "top": top,
    "demo": demo,
    "block": points.block,
    "unblock": points.unblock,
    "penalize": points.penalize,
    "reward": points.reward,
}
