"""Rows of the live counters: the state of a page of keys, read in one pipeline.

One row per (policy, identity, fingerprint). A row whose fingerprint is one
of the policy's current rates (its only one; each rate of a per-plan policy,
found in the rate catalogue; each spec of an inline group) is *live*: its
state is what ``Policy.peek`` would see, read with the algorithm's own peek
(``queue_peek``) for every row at once, and the row says which rate applied.
Keys left by an earlier configuration of a policy (another fingerprint) are
*stale*, and keys of a policy that is no longer configured (or whose settings
are now invalid) are *unconfigured*: no decision reads either kind, so they
are shown with the time until they expire, are never counted, and cannot be
reset from here (they go away by their TTL).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from django_rl.algorithms import Reading
from django_rl.core.keys import KeyIdentity, safe_identity
from django_rl.policies.registry import Policy, policies_named
from django_rl.policies.rollout import outside, percent_of

if TYPE_CHECKING:
    from redis.client import Pipeline

    from django_rl.backends import Backend, RedisNode
    from django_rl.inspection.keyspace import ParsedKey
    from django_rl.policies.plans import Variant

LIVE = "live"
STALE = "stale"
UNCONFIGURED = "unconfigured"

_ORDER = {LIVE: 0, STALE: 1, UNCONFIGURED: 2}


@dataclass(frozen=True)
class Row:
    """One (policy, identity) as the page and ``manage.py ratelimit top`` show it.

    Numbers are those of a hit of cost 1 now (see ``Decision``); ``used`` is
    ``Reading.used``; ``rate`` the rate whose state the row is (for a
    per-plan policy, the one its rate function returned). For stale and
    unconfigured rows only ``reset_after`` is known: the time until their
    keys expire.
    """

    policy: str
    identity: KeyIdentity
    status: str
    keys: tuple[str, ...]
    algorithm: str = ""
    rate: str = ""
    limit: int = 0
    used: float = 0
    remaining: int = 0
    denied: bool = False
    #: The policy is in shadow mode: a denial here is one it would make, not enforced.
    shadow: bool = False
    #: The policy's ``enforce_percent`` now (an admin override's, else its own).
    enforce_percent: float = 100.0
    retry_after: float = 0.0
    reset_after: float = 0.0
    detail: str = ""
    #: Seconds left in the identity's block (0: not blocked).
    blocked: float = 0.0

    @property
    def usage(self) -> float:
        """Return the share of the limit in use (above 1 for an over-counted fixed window)."""
        return self.used / self.limit if self.limit else 0.0

    @property
    def selector(self) -> str:
        """Return ``policy:identity``, how reset forms name the row (policy names have no ``:``)."""
        return f"{self.policy}:{self.identity}"

    @property
    def blocked_text(self) -> str:
        """Return the time left in the identity's block, in words ("" when not blocked)."""
        return format_duration(self.blocked) if self.blocked else ""

    @property
    def retry_text(self) -> str:
        """Return ``retry_after`` for people (see :func:`format_duration`)."""
        return format_duration(self.retry_after)

    @property
    def reset_text(self) -> str:
        """Return ``reset_after`` for people (see :func:`format_duration`)."""
        return format_duration(self.reset_after)

    @property
    def used_text(self) -> str:
        """Return ``used`` for people: whole, or to a tenth rounded up (a refilling bucket)."""
        return f"{math.ceil(self.used * 10) / 10:g}"

    def as_dict(self) -> dict[str, Any]:
        """Return the row as JSON-ready values."""
        return {
            "policy": self.policy,
            "identity": str(self.identity),
            "status": self.status,
            "algorithm": self.algorithm,
            "rate": self.rate,
            "limit": self.limit,
            "used": self.used,
            "remaining": self.remaining,
            "denied": self.denied,
            "shadow": self.shadow,
            "retry_after": self.retry_after,
            "reset_after": self.reset_after,
            "detail": self.detail,
            "blocked": self.blocked,
            "keys": list(self.keys),
        }


def format_duration(seconds: float) -> str:
    """Return a duration the way a person reads it: ``0.4 s``, ``42 s``, ``3 min 5 s``, ``2 h``.

    Rounded up, so a wait is never shown shorter than it is.
    """
    if seconds <= 0:
        return "0 s"
    if seconds < 10:
        return f"{math.ceil(seconds * 10) / 10:g} s"
    whole = math.ceil(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return _two_units(whole // 60, "min", whole % 60, "s")
    if whole < 86400:
        return _two_units(whole // 3600, "h", math.ceil(whole % 3600 / 60), "min")
    return _two_units(whole // 86400, "d", math.ceil(whole % 86400 / 3600), "h")


def _two_units(big: int, big_unit: str, small: int, small_unit: str) -> str:
    return f"{big} {big_unit} {small} {small_unit}" if small else f"{big} {big_unit}"


def sort_rows(rows: Iterable[Row]) -> list[Row]:
    """Return live rows first, heaviest usage first, then stale and unconfigured ones."""
    return sorted(rows, key=lambda r: (_ORDER[r.status], -r.usage, r.policy, r.identity))


#: Reads one row from the pipeline's replies; ``None`` when its keys are gone.
RowReader = Callable[[Iterator[Any]], "Row | None"]


def read_rows(
    backend: Backend, keys: Iterable[ParsedKey], unavailable: list[str] | None = None
) -> list[Row]:
    """Return the rows of ``keys``, sorted, their state read in one pipeline per node.

    An identity's keys share its hash tag, so the keys of a row all live on
    one node (the one server; a primary of a cluster). With ``unavailable``,
    a node that cannot be read is added to it (by address) and its rows are
    left out, instead of failing the whole read.

    :raises redis.exceptions.RedisError: if Redis cannot answer.
    """
    groups: dict[tuple[str, KeyIdentity, str], list[str]] = {}
    for parsed in keys:
        groups.setdefault((parsed.policy, parsed.identity, parsed.fingerprint), []).append(
            parsed.key
        )
    variants = {name: _variants_named(name) for name, _, _ in groups}
    on_node: dict[RedisNode, list[tuple[tuple[str, KeyIdentity, str], list[str]]]] = {}
    for row_id, group in groups.items():
        on_node.setdefault(backend.node_for(group[0]), []).append((row_id, group))

    def queue(pipe: Pipeline, node: RedisNode, rows: list[Any]) -> list[RowReader]:
        readers = []
        for (name, identity, fp), group in rows:
            known = variants[name]
            if known is not None and fp in known:
                policy, variant = known[fp]
                readers.append(_queue_live(pipe, node, policy, variant, identity, tuple(group)))
            else:
                status = STALE if known is not None else UNCONFIGURED
                readers.append(_queue_expiring(pipe, name, identity, tuple(group), status))
        return readers

    found: list[Row] = []
    for node, rows in on_node.items():
        try:
            readers, replies = node.pipeline(functools.partial(queue, node=node, rows=rows))
        except RedisError:
            if unavailable is None:
                raise
            unavailable.append(node.address or node.alias)
            continue
        found += _collect(readers, replies)
    return sort_rows(found)


def lookup_rows(
    backend: Backend,
    policies: Sequence[Policy],
    identity: str,
    unavailable: list[str] | None = None,
) -> list[Row]:
    """Return the live rows of one identity under ``policies``, read in one pipeline.

    The keys are computed, not searched for, so this is as fast with a
    million keys as with ten. ``identity`` is raw (made safe like a
    request's) or a :class:`KeyIdentity`. Its keys share its hash tag: they
    all live on one node. With ``unavailable``, a node that cannot be read
    is added to it and no rows are returned, as in :func:`read_rows`.

    :raises redis.exceptions.RedisError: if Redis cannot answer.
    """
    stored = KeyIdentity(safe_identity(identity))
    if not policies:
        return []
    # Every key of the identity carries its hash tag: any of them names the node.
    node = backend.node_for(f"{{{stored}}}")

    def queue(pipe: Pipeline) -> list[RowReader]:
        readers = []
        for policy, variant in rates:
            keys = variant.algorithm.keys(node, policy.variant_key(variant, stored))
            for key in keys:
                pipe.exists(key)
            readers.append(_queue_existing(pipe, node, policy, variant, stored, keys))
        return readers

    try:
        rates = [(policy, variant) for policy in policies for variant in policy.recorded_variants()]
        readers, replies = node.pipeline(queue)
    except RedisError:
        if unavailable is None:
            raise
        unavailable.append(node.address or node.alias)
        return []
    return sort_rows(_collect(readers, replies))


def _collect(readers: list[RowReader], replies: list[Any]) -> list[Row]:
    stream = iter(replies)
    rows = [read(stream) for read in readers]
    return [row for row in rows if row is not None]


def _variants_named(name: str) -> dict[str, tuple[Policy, Variant]] | None:
    """Return the live rates of the policies named ``name``, by fingerprint; None if none is.

    A per-plan policy's rates come from its rate catalogue (one read).

    :raises redis.exceptions.RedisError: if Redis cannot answer.
    """
    policies = policies_named(name, strict=False)
    if not policies:
        return None  # not configured (any more), or its settings are invalid
    return {
        variant.fingerprint: (policy, variant)
        for policy in policies
        for variant in policy.recorded_variants()
    }


def _queue_live(
    pipe: Pipeline,
    node: RedisNode,
    policy: Policy,
    variant: Variant,
    identity: KeyIdentity,
    keys: tuple[str, ...],
) -> RowReader:
    read = variant.algorithm.queue_peek(pipe, node, policy.variant_key(variant, identity))
    return lambda replies: _live_row(policy, variant, identity, keys, read(replies))


def _queue_existing(
    pipe: Pipeline,
    node: RedisNode,
    policy: Policy,
    variant: Variant,
    identity: KeyIdentity,
    keys: list[str],
) -> RowReader:
    read = variant.algorithm.queue_peek(pipe, node, policy.variant_key(variant, identity))

    def row(replies: Iterator[Any]) -> Row | None:
        existing = tuple(key for key in keys if next(replies))
        reading = read(replies)
        return _live_row(policy, variant, identity, existing, reading) if existing else None

    return row


def _live_row(
    policy: Policy,
    variant: Variant,
    identity: KeyIdentity,
    keys: tuple[str, ...],
    reading: Reading,
) -> Row | None:
    if reading.used <= 0 and not reading.blocked:
        return None  # the state expired or was reset between SCAN and this read
    outcome = reading.outcome
    return Row(
        policy=policy.name,
        identity=identity,
        status=LIVE,
        keys=keys,
        algorithm=variant.algorithm.name,
        rate=variant.rate,
        limit=variant.limit,
        used=reading.used,
        remaining=outcome.remaining,
        denied=not outcome.allowed,
        # Outside its enforce_percent (rollout.py), an identity's denials are shadow too.
        shadow=policy.shadow or (policy.partial and outside(policy, str(identity))),
        enforce_percent=percent_of(policy),
        retry_after=outcome.retry_after_ms / 1000,
        reset_after=outcome.reset_after_ms / 1000,
        detail=reading.detail,
        blocked=reading.blocked,
    )


def _queue_expiring(
    pipe: Pipeline, policy: str, identity: KeyIdentity, keys: tuple[str, ...], status: str
) -> RowReader:
    for key in keys:
        pipe.pttl(key)
    detail = (
        "left by an earlier configuration of this policy; unused, it expires by its TTL"
        if status == STALE
        else "policy not configured (or invalid); unused, it expires by its TTL"
    )

    def row(replies: Iterator[Any]) -> Row | None:
        # PTTL: -2 for a key that is gone, -1 for one without a TTL (it
        # would be healed by a hit, but no hit reads stale state).
        ttls = [next(replies) for _ in keys]
        alive = tuple(key for key, ttl in zip(keys, ttls, strict=True) if ttl != -2)
        if not alive:
            return None
        reset_ms = max(ttls)
        return Row(
            policy=policy,
            identity=identity,
            status=status,
            keys=alive,
            reset_after=reset_ms / 1000 if reset_ms > 0 else 0.0,
            detail=detail if reset_ms != -1 else "unused, and it has no TTL: delete it by hand",
        )

    return row
