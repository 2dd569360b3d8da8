"""The window a rate grants its whole quota in: the ``w`` of the ``RateLimit-Policy`` header."""

from __future__ import annotations

from typing import Any

from django_rl.core.rates import Rate

#: A calendar period's usual length in seconds (a month: 30 days; a year: 365).
NOMINAL_SECONDS = {"day": 86_400, "week": 604_800, "month": 2_592_000, "year": 31_536_000}


def quota_window(algorithm: Any) -> int | None:
    """Return ``w``: the seconds the policy's rate takes to grant its whole quota.

    For ``fixed_window`` and ``sliding_log`` that is the period of the rate
    (``5/m`` -> 60). For ``token_bucket`` it is capacity / refill rate,
    rounded up (capacity 3 at ``1/s`` -> 3), so ``q/w`` is never above the
    refill rate a client can sustain. For ``"0/<period>"``, the period.
    ``None`` for an algorithm without a rate (``rate: None``).
    """
    rate = getattr(algorithm, "rate", None)
    calendar = getattr(algorithm, "calendar", None)
    if calendar is not None:
        # A calendar quota's window is its period's, which varies (a 23-hour
        # day, a 28-day month): each Decision has its own (the quota's
        # Outcome, or outcomes.window_now). This nominal one is the variant's.
        return NOMINAL_SECONDS[calendar.period]
    if not isinstance(rate, Rate):
        return None
    if rate.denies_all:  # "0/<period>": nothing is granted; clients are told to wait a period
        return max(1, -(-rate.period_ms // 1000))
    limit: int = algorithm.limit
    return max(1, -(-limit * rate.period_ms // (rate.limit * 1000)))
