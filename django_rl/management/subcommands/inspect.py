"""``ratelimit inspect POLICY IDENTITY``: the Decision as ``peek`` sees it, and the raw keys."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from redis.exceptions import RedisError

from django_rl.algorithms.base import read_now
from django_rl.algorithms.quota import Quota
from django_rl.core.keys import safe_identity
from django_rl.core.reprs import counted
from django_rl.exceptions import BackendError
from django_rl.inspection import operator_identity
from django_rl.inspection.rows import format_duration, lookup_rows
from django_rl.management.subcommands.output import table
from django_rl.policies.registry import Policy, policies_named

if TYPE_CHECKING:
    from redis.client import Pipeline

    from django_rl.backends import RedisNode

HELP = (
    "Show what a hit of IDENTITY under POLICY would be told now, and its keys in Redis "
    "(for per-plan rates and inline groups: each rate's state)."
)


def add_arguments(parser: CommandParser) -> None:
    parser.add_argument("policy", help="a policy name")
    parser.add_argument(
        "identity",
        help="the identity, raw (ip:203.0.113.9, user:42) or as the admin shows it "
        "(x-api-key:~3f2a...), or a client address (203.0.113.9): the identity requests "
        "from it are counted as under POLICY",
    )


def handle(command: BaseCommand, options: dict[str, Any]) -> None:
    policies = policies_named(options["policy"])
    try:
        identity = operator_identity(options["identity"], policies[0].name)
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    write = command.stdout.write
    if len(policies) > 1 or policies[0].per_request:
        _rates(command, policies, identity)
        return
    (policy,) = policies
    try:
        # Read first: peek answers even when Redis cannot (from the outage
        # fallback or by fail_open), and this command is about Redis's state.
        node = policy.backend.node_for(policy.key(identity))
        rows = _describe(node, policy.algorithm.keys(node, policy.key(identity)))
        # A calendar quota's period: its start and end in the policy's time zone.
        period = (
            read_now(policy.algorithm, node, policy.key(identity)).detail
            if isinstance(policy.algorithm, Quota)
            else ""
        )
    except RedisError as exc:
        raise BackendError(f"could not read policy {policy.name!r}: {exc}") from exc
    decision = policy.peek(identity)
    write(f"policy       {policy.name} ({policy.algorithm.description})")
    write(f"identity     {safe_identity(identity)}")
    write(f"allowed      {'yes' if decision.allowed else 'no'}")
    write(f"limit        {decision.limit}")
    write(f"remaining    {decision.remaining}")
    write(f"retry after  {format_duration(decision.retry_after)}")
    write(f"reset after  {format_duration(decision.reset_after)}")
    if period:
        write(f"period       {period}")
    if not rows:
        write("keys         none: no state under this policy")
        return
    write("keys")
    write(table(["  key", "type", "ttl", "value"], rows, numeric=frozenset()))


def _rates(command: BaseCommand, policies: list[Policy], identity: str) -> None:
    """Show each rate's state of ``identity``: per-plan rates, or an inline group's specs."""
    write = command.stdout.write
    name = policies[0].name
    write(f"policy       {name} (a state per rate)")
    write(f"identity     {safe_identity(identity)}")
    try:
        rows = lookup_rows(policies[0].backend, policies, identity)
    except RedisError as exc:
        raise BackendError(f"could not read policy {name!r}: {exc}") from exc
    if not rows:
        write("rates        none: no state under this policy")
        return
    header = ["  rate", "algorithm", "used / limit", "remaining", "status", "resets in", "keys"]
    lines = [
        [
            f"  {row.rate}",
            row.algorithm,
            f"{row.used_text} / {row.limit}",
            str(row.remaining),
            f"denied, retry in {row.retry_text}" if row.denied else "allowed",
            row.reset_text,
            " ".join(row.keys),
        ]
        for row in rows
    ]
    write("rates")
    write(table(header, lines, numeric=frozenset({2, 3})))


def _describe(node: RedisNode, keys: list[str]) -> list[list[str]]:
    """Return (key, type, ttl, value) of the keys that exist, in two round trips."""

    def types_and_ttls(pipe: Pipeline) -> None:
        for key in keys:
            pipe.type(key)
            pipe.pttl(key)

    _, replies = node.pipeline(types_and_ttls)
    found = [
        (key, _text(kind), ttl)
        for key, kind, ttl in zip(keys, replies[::2], replies[1::2], strict=True)
        if _text(kind) != "none"
    ]
    readers = {"string": "get", "zset": "zcard", "hash": "hgetall"}

    def values(pipe: Pipeline) -> None:
        for key, kind, _ in found:
            getattr(pipe, readers.get(kind, "type"))(key)

    _, contents = node.pipeline(values)
    return [
        [f"  {key}", kind, format_duration(ttl / 1000) if ttl >= 0 else "none", _value(kind, v)]
        for (key, kind, ttl), v in zip(found, contents, strict=True)
    ]


def _value(kind: str, value: Any) -> str:
    if kind == "zset":
        return counted(int(value), "entry", "entries")
    if kind == "hash":
        return " ".join(f"{_text(k)}={_text(v)}" for k, v in sorted(value.items()))
    return _text(value)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
