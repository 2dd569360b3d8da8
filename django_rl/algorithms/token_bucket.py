"""Token bucket: bursts up to a capacity, an average rate over time.

State: a hash ``{u: units, t: time}`` per identity (tokens in units of 1/period of a
token, see ``token_bucket.lua``). ``capacity`` is the burst size; ``rate`` the
refill, e.g. ``"1/s"``. A hit of cost c takes c tokens; Retry-After is the
time until c tokens are back. Denied hits take nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

from django_rl.algorithms.base import (
    BucketAlgorithm,
    Outcome,
    ParameterError,
    Reading,
    ScriptAlgorithm,
    algorithm_script,
    new_tuple,
    whole_count,
)
from django_rl.backends import LuaScript
from django_rl.core.rates import Rate
from django_rl.core.reprs import plural

SCRIPT = algorithm_script("token_bucket")

#: capacity * period_ms must stay exact in Lua's doubles.
MAX_UNITS = 2**52


class TokenBucket(BucketAlgorithm, ScriptAlgorithm):
    name: ClassVar[str] = "token_bucket"
    parameters: ClassVar[frozenset[str]] = frozenset({"rate", "capacity"})
    size_parameter: ClassVar[str] = "capacity"
    denial_holds_for_any_cost: ClassVar[bool] = False
    script: ClassVar[LuaScript] = SCRIPT

    def __init__(self, capacity: int, rate: Rate) -> None:
        capacity = whole_count("capacity", capacity)
        if capacity * rate.period_ms > MAX_UNITS:
            raise ParameterError(
                f"capacity {capacity} with a refill period of {rate.period:g}s is too large "
                "to count exactly; use a smaller capacity or a shorter period"
            )
        self.capacity = capacity
        self.rate = rate

    @property
    def limit(self) -> int:
        return self.capacity

    @property
    def description(self) -> str:
        return f"{self.name} {self.capacity} {self.rate}"

    def script_args(self, cost: int, commit: str) -> tuple[int, int, int, int, str]:
        return (self.capacity, self.rate.limit, self.rate.period_ms, cost, commit)

    def outcome(self, reply: Sequence[int]) -> Outcome:
        allowed, units, retry_ms, reset_ms = reply
        remaining = units // self.rate.period_ms
        if remaining < 0:  # (only after a penalty, policies/points.py: no tokens left)
            remaining = 0
        return new_tuple(Outcome, (bool(allowed), remaining, retry_ms, reset_ms))

    def reading(self, reply: Sequence[int]) -> Reading:
        tokens = reply[1] / self.rate.period_ms
        # Rounded down: a bucket never looks fuller than it is.
        shown = math.floor(tokens * 10) / 10
        used = round(self.capacity - tokens, 6)  # no float noise in what people see
        return Reading(
            self.outcome(reply), used, f"{shown:g} {plural(1 if shown == 1 else 2, 'token')} left"
        )
