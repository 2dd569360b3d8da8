"""The window a rate grants its whole quota in: the ``w`` of the ``RateLimit-Policy`` header."""

from __future__ import annotations

from typing import Any

from django_rl.core.rates import Rate


def quota_window(algorithm: Any) -> int | None:
    """Return ``w``: the seconds the policy's rate takes to grant its whole quota.

    For ``fixed_window`` and ``sliding_log`` that is the period of the rate
    (``5/m`` -> 60). For ``token_bucket`` it is capacity / refill rate,
    rounded up (capacity 3 at ``1/s`` -> 3), so ``q/w`` is never above the
    refill rate a client can sustain. For ``"0/<period>"``, the period.
    ``None`` for an algorithm without a rate (``rate: None``).
    """
    rate = getattr(algorithm, "rate", None)
    if not isinstance(rate, Rate):
        return None
    if rate.denies_all:  # "0/<period>": nothing is granted; clients are told to wait a period
        return max(1, -(-rate.period_ms // 1000))
    limit: int = algorithm.limit
    return max(1, -(-limit * rate.period_ms // (rate.limit * 1000)))
