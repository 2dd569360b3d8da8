"""The algorithms, by the name a policy's ``algorithm`` setting uses."""

from __future__ import annotations

from django_rl.algorithms.base import (
    Algorithm,
    Outcome,
    ParameterError,
    Reading,
    fingerprint_text,
)
from django_rl.algorithms.concurrency import Concurrency
from django_rl.algorithms.fixed_window import FixedWindow
from django_rl.algorithms.gcra import Gcra
from django_rl.algorithms.quota import Quota
from django_rl.algorithms.sliding_log import SlidingLog
from django_rl.algorithms.sliding_window import SlidingWindow
from django_rl.algorithms.static import DenyAll, StaticAlgorithm, Unlimited
from django_rl.algorithms.token_bucket import TokenBucket

ALGORITHMS: dict[str, type[Algorithm]] = {
    FixedWindow.name: FixedWindow,
    SlidingLog.name: SlidingLog,
    TokenBucket.name: TokenBucket,
    Gcra.name: Gcra,
    SlidingWindow.name: SlidingWindow,
    Concurrency.name: Concurrency,
    Quota.name: Quota,
}

#: Every parameter any algorithm takes; a policy key outside this set and the
#: common keys is a typo, not a parameter of some other algorithm.
ALL_PARAMETERS: frozenset[str] = frozenset().union(*(a.parameters for a in ALGORITHMS.values()))

__all__ = [
    "ALGORITHMS",
    "ALL_PARAMETERS",
    "Algorithm",
    "DenyAll",
    "Outcome",
    "ParameterError",
    "Reading",
    "StaticAlgorithm",
    "Unlimited",
    "fingerprint_text",
]
