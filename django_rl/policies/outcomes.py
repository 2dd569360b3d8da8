"""The Decisions a policy makes without asking Redis, and the checks of a hit's cost.

Each is a plain function of the policy's name and the variant (the rate) in
force, so that :class:`~django_rl.policies.policy.Policy` keeps only the
order in which they apply.
"""

from __future__ import annotations

import functools
import logging
import time

from django_rl.algorithms import StaticAlgorithm
from django_rl.algorithms.periods import Span
from django_rl.backends.clock import app_ms
from django_rl.core.decision import Decision
from django_rl.core.reprs import short_repr
from django_rl.overrides.rules import Rule
from django_rl.policies.plans import Variant

#: Retry-After of a request denied because Redis is down and FAIL_OPEN is False.
DEGRADED_RETRY_AFTER = 1.0

logger = logging.getLogger("django_rl")


def no_limit(name: str) -> Decision:
    """Return the Decision of a hit no limit applies to (an exemption, a rate function's ``None``).

    Allowed, ``limit`` 0: what the programmatic API (``hit``, ``peek``)
    answers; the front doors make no Decision at all for such a request.
    """
    return Decision(True, 0, 0, 0.0, 0.0, name)


def static(name: str, variant: Variant, cost: int) -> Decision:
    """Return the Decision of a static rate (``None`` allows, ``"0/<period>"`` denies).

    :raises ValueError: if ``cost`` is not a whole number of at least 1.
    """
    if type(cost) is not int or cost < 1:
        raise ValueError(f"cost must be a whole number of at least 1, not {short_repr(cost)}")
    assert isinstance(variant.algorithm, StaticAlgorithm)
    outcome = variant.algorithm.outcome
    allowed, remaining, retry_ms, reset_ms = outcome
    return Decision(
        allowed, variant.limit, remaining, retry_ms / 1000, reset_ms / 1000, name,
        False, getattr(outcome, "window", variant.window),
    )  # fmt: skip


def blocked(name: str, rule: Rule, variant: Variant | None) -> Decision:
    """Return the Decision of an operator's block: denied until the override expires (capped)."""
    wait = rule.retry_after(time.time())
    if variant is None:  # a per-plan policy whose rate function said "no limit"
        return Decision(False, 0, 0, wait, wait, name)
    return Decision(False, variant.limit, 0, wait, wait, name, False, window_now(variant))


def degraded(name: str, variant: Variant, fail_open: bool) -> Decision:
    """Return the Decision of a hit Redis could not answer, by ``fail_open`` (no fallback)."""
    return Decision(
        allowed=fail_open,
        limit=variant.limit,
        remaining=variant.limit if fail_open else 0,
        retry_after=0.0 if fail_open else DEGRADED_RETRY_AFTER,
        reset_after=0.0,
        policy=name,
        degraded=True,
        window=window_now(variant),
    )


def too_heavy(name: str, variant: Variant, cost: int, *, strict: bool) -> Decision:
    """Return the denial of a hit whose ``cost`` is above the limit; or raise (``strict``).

    One behaviour, by who asks (docs/algorithms.md): code that calls
    ``hit``/``hit_many`` with a cost above a limit known in advance gets
    ``ValueError`` (it is a bug in that code, and ``manage.py check`` reports
    a decorator's as ``django_rl.E014``); a request is never failed for its
    weight, so the front doors, and a rate chosen per request, get a denial:
    ``remaining`` 0 and, as ``retry_after``, the time the policy takes to
    grant its whole limit, logged once per policy, cost and limit. Such a hit
    could never be allowed.
    """
    if strict:
        raise ValueError(
            f"cost {short_repr(cost)} is above the limit {variant.limit} of policy {name!r}: "
            "such a hit could never be allowed"
        )
    _log_too_heavy(name, cost, variant.limit)
    window = window_now(variant)
    wait = float(window or 1)
    return Decision(False, variant.limit, 0, wait, wait, name, False, window)


def window_now(variant: Variant) -> int | None:
    """Return the window of a Decision made without Redis: the variant's, or a calendar
    quota's current period's length on this host's clock (a 23-hour day, a 28-day month)."""
    calendar = getattr(variant.algorithm, "calendar", None)
    if calendar is None:
        return variant.window
    span: Span = calendar.span(app_ms())
    return span.seconds


def bad_cost(cost: object) -> ValueError:
    """Return the error of a cost that is not a whole number of at least 1."""
    return ValueError(f"cost must be a whole number of at least 1, not {short_repr(cost)}")


@functools.cache
def _log_too_heavy(name: str, cost: int, limit: int) -> None:
    """Log, once per process, that requests of ``cost`` under policy ``name`` are all denied."""
    logger.error(
        "Requests of cost %s are denied by rate-limit policy %r, whose limit is %d: "
        "lower the cost or raise the limit (django_rl.E014).",
        short_repr(cost),
        name,
        limit,
    )
