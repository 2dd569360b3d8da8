"""Sliding window counter: near the sliding log's accuracy at a fixed window's memory.

State: one small hash per identity, ``{w: window, c: its count, p: the count
of the window before}``, about 100 bytes of Redis memory with its key
(``MEMORY USAGE``, see docs/algorithms.md), whatever the rate. Windows are
aligned on the server's clock, as ``fixed_window``'s are. A hit is allowed
when ``prev * (period - elapsed) / period + curr + cost <= limit``: the
previous window's hits are assumed spread evenly over it, and the part of it
the sliding window still covers is counted. Denied hits count nowhere.

How far it is from the sliding log (docs/algorithms.md has the proofs and
the tests): at a window edge it denies what the sliding log denies (the
seed's edge burst, 5 hits just before a 5/s edge and 5 just after: 5 of 10
allowed, as by the sliding log; ``fixed_window`` allows 10). The worst
case, for a client that sends a window's hits at its very end and then spreads hits
over the next, is ``2 * limit - 1`` hits in some span of one period (the
sliding log: ``limit``; the fixed window: ``2 * limit``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from django_rl.algorithms.base import (
    Outcome,
    ParameterError,
    RateAlgorithm,
    Reading,
    ScriptAlgorithm,
    algorithm_script,
    new_tuple,
)
from django_rl.backends import LuaScript
from django_rl.core.rates import Rate

SCRIPT = algorithm_script("sliding_window")

#: ``limit * period_ms`` stays below this (Lua's doubles are exact below 2^53).
MAX_UNITS = 2**52


class SlidingWindow(ScriptAlgorithm, RateAlgorithm):
    name: ClassVar[str] = "sliding_window"
    # A denied heavy hit says nothing of a light one.
    denial_holds_for_any_cost: ClassVar[bool] = False
    script: ClassVar[LuaScript] = SCRIPT

    def __init__(self, rate: Rate) -> None:
        if rate.limit * rate.period_ms > MAX_UNITS:
            raise ParameterError(
                f"sliding_window cannot count {rate} exactly (limit times the period in ms "
                f"must be at most 2^52); use a lower limit or a shorter period"
            )
        super().__init__(rate)

    def script_args(self, cost: int, commit: str) -> tuple[int, int, int, str]:
        return (self.rate.period_ms, self.rate.limit, cost, commit)

    def outcome(self, reply: Sequence[int]) -> Outcome:
        allowed, remaining, retry_ms, reset_ms = reply[:4]
        return new_tuple(Outcome, (bool(allowed), remaining, retry_ms, reset_ms))

    def reading(self, reply: Sequence[int]) -> Reading:
        curr, prev, elapsed = reply[4:7]
        period = self.rate.period_ms
        used = round(prev * (period - elapsed) / period + curr, 6)
        return Reading(self.outcome(reply), used, f"{curr:,} this window, {prev:,} the last")
