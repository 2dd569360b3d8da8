"""``manage.py ratelimit SUBCOMMAND``: look at and reset rate-limit state.

Each subcommand is a module of ``django_rl.management.subcommands``, listed in
its ``SUBCOMMANDS``; this only routes to them and turns the app's errors into
``CommandError`` (a message on stderr, exit status 1).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from redis.exceptions import RedisError

from django_rl.checks.names import SETTINGS_TAG
from django_rl.exceptions import BackendError, ConfigurationError
from django_rl.management.subcommands import SUBCOMMANDS


class Command(BaseCommand):
    help = "Look at the rate-limit policies and their live state in Redis, and reset it."
    # The settings checks only: the server's (a trial hit per algorithm) would
    # cost a round of Redis calls, or a timeout, before every subcommand.
    requires_system_checks = (SETTINGS_TAG,)

    def add_arguments(self, parser: CommandParser) -> None:
        subparsers = parser.add_subparsers(
            dest="subcommand", metavar="SUBCOMMAND", title="subcommands", required=True
        )
        for name, subcommand in SUBCOMMANDS.items():
            subcommand.add_arguments(
                subparsers.add_parser(name, help=subcommand.HELP, description=subcommand.HELP)
            )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            SUBCOMMANDS[options["subcommand"]].handle(self, options)
        except (ConfigurationError, BackendError) as exc:
            raise CommandError(str(exc)) from exc
        except RedisError as exc:
            raise CommandError(f"Redis could not answer: {exc}") from exc
