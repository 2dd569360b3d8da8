"""One page of live counters: what the admin page, its JSON and ``ratelimit top`` ask for."""

from __future__ import annotations

from dataclasses import dataclass, field

from redis.exceptions import RedisError

from django_rl.backends import get_backend
from django_rl.conf import get_settings
from django_rl.exceptions import BackendError
from django_rl.inspection.keyspace import (
    FIRST_PAGE,
    SCAN_BUDGET,
    answering_targets,
    check_filters,
    is_bookkeeping,
    match_pattern,
    operator_identity,
    parse_cursor,
    parse_key,
    scan_keys,
)
from django_rl.inspection.rows import Row, lookup_rows, read_rows
from django_rl.policies.registry import Policy, policies_named, policy_names

#: Rows a page aims at, by default and at most.
PAGE_SIZE = 50
MAX_PAGE_SIZE = 500


@dataclass(frozen=True)
class Query:
    """What to list.

    :ivar policy: only this policy's keys (any valid policy name, configured
        or not), or all.
    :ivar identity: an identity, or the start of one, as keys hold it (see
        ``operator_identity`` for the exact search of a raw identity).
    :ivar exact: ``identity`` is a whole identity: its keys are computed for
        each configured policy instead of searched for.
    :ivar cursor: where the page starts (``Page.next_cursor`` of the last one).
    """

    policy: str | None = None
    identity: str = ""
    exact: bool = False
    cursor: str = FIRST_PAGE
    page_size: int = PAGE_SIZE
    budget: int = SCAN_BUDGET

    def __post_init__(self) -> None:
        """Check every field, so a bad query fails before it reaches Redis.

        :raises ValueError: with a message fit to show the person who asked.
        """
        parse_cursor(self.cursor)
        if not 1 <= self.page_size <= MAX_PAGE_SIZE:
            raise ValueError(f"page size must be from 1 to {MAX_PAGE_SIZE}")
        if self.budget < 1:
            raise ValueError("the scan budget must be at least 1")
        if self.exact and not self.identity:
            raise ValueError("an exact search needs an identity")
        if not self.exact:
            check_filters(self.policy, self.identity)
        elif self.policy is not None:
            check_filters(self.policy, "")


@dataclass(frozen=True)
class Page:
    """Rows, heaviest first, and where the walk through the keyspace stands.

    :ivar next_cursor: the next page's cursor; ``None`` when there is none.
    :ivar examined: keys SCAN looked at for this page (0 for an exact search).
    :ivar keys_in_redis: every key in the Redis databases walked (DBSIZE),
        this app's and others'.
    :ivar skipped: keys under the prefix that are not of this app's form.
    :ivar unavailable: the servers (cluster primaries, by address) that did
        not answer: their keys are not on the page.
    """

    query: Query
    rows: list[Row] = field(default_factory=list)
    next_cursor: str | None = None
    examined: int = 0
    keys_in_redis: int = 0
    skipped: int = 0
    unavailable: tuple[str, ...] = ()


def list_counters(query: Query) -> Page:
    """Return one page of counters; the work is bounded whatever the keyspace's size.

    A server that does not answer (a cluster primary that is down) is left
    out, and named in ``Page.unavailable``; the others are listed.

    :raises BackendError: if Redis cannot answer (no server does).
    :raises ConfigurationError: if the settings are invalid, or an exact
        search names a policy that is not configured.
    :raises CursorError: if the cursor names a server there is not.
    """
    settings = get_settings()
    backend = get_backend(settings.connection)
    try:
        targets = answering_targets(backend)
        unavailable = list(targets.unavailable)
        if query.exact:
            policies = configured_policies(
                [query.policy] if query.policy else None, strict=query.policy is not None
            )
            rows = lookup_rows(backend, policies, operator_identity(query.identity), unavailable)
            return Page(
                query,
                rows,
                keys_in_redis=targets.keys_in_redis,
                unavailable=tuple(dict.fromkeys(unavailable)),
            )
        pattern = match_pattern(settings.key_prefix, query.policy, query.identity)
        step = scan_keys(
            targets.clients, pattern, query.cursor, want=query.page_size, budget=query.budget
        )
        parsed = [parse_key(settings.key_prefix, key) for key in step.keys]
        rows = read_rows(backend, (p for p in parsed if p is not None), unavailable)
    except RedisError as exc:
        raise BackendError(f"could not read the rate-limit counters: {exc}") from exc
    skipped = sum(
        1
        for key, found in zip(step.keys, parsed, strict=True)
        if found is None and not is_bookkeeping(settings.key_prefix, key)
    )
    return Page(
        query,
        rows,
        next_cursor=step.next_cursor,
        examined=step.examined,
        keys_in_redis=targets.keys_in_redis,
        skipped=skipped,
        unavailable=tuple(dict.fromkeys(unavailable)),
    )


def configured_policies(names: list[str] | None = None, *, strict: bool = False) -> list[Policy]:
    """Return the policies named (every one by default: settings, code, inline) that can be built.

    An inline name (``@group``) stands for every policy of that group. A
    policy whose settings are invalid is left out (``manage.py check``
    reports it; it can have made no decision), unless ``strict``.

    :raises ConfigurationError: with ``strict``, for an unknown or invalid one.
    """
    if names is None:
        names = policy_names()
    return [policy for name in names for policy in policies_named(name, strict=strict)]


def reset_everywhere(identity: str) -> dict[str, int]:
    """Reset ``identity`` under every policy, through ``Policy.reset``.

    ``identity`` as an operator types it (see :func:`identities_everywhere`).
    Return the keys deleted, per policy name.

    :raises BackendError: if Redis cannot answer.
    :raises ValueError: for a network (not one identity).
    """
    deleted: dict[str, int] = {}
    for policy, who in identities_everywhere(identity):
        deleted[policy.name] = deleted.get(policy.name, 0) + policy.reset(who)
    return deleted


def identities_everywhere(identity: str) -> list[tuple[Policy, str]]:
    """Return every policy with ``identity`` as it counts it (``operator_identity``).

    ``identity`` as an operator types it: an address is, under each policy,
    the identity requests from it have there (``ip:127.0.0.1``); a policy
    that never counts by address is left out for one.

    :raises ValueError: for a network (not one identity).
    """
    found = []
    for policy in configured_policies():
        try:
            found.append((policy, operator_identity(identity, policy.name)))
        except ValueError:
            if "/" in identity:
                raise  # a network: the same for every policy
            # An address under a policy that counts users (say): none of its state.
    return found
