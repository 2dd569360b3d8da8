"""Sliding log: exact, no edge burst, memory proportional to the limit.

State: a ZSET per identity, one member per allowed unit of cost, scored by
the server time of the hit; ``sliding_log.lua`` does check-then-add in one
EVALSHA. Denied hits add nothing. Retry-After is the time until enough of the
oldest entries leave the window for this hit to fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from django_rl.algorithms.base import Outcome, RateAlgorithm, Reading, ScriptAlgorithm
from django_rl.backends import LuaScript

SCRIPT = LuaScript.from_package(__package__, "sliding_log.lua")


class SlidingLog(ScriptAlgorithm, RateAlgorithm):
    name: ClassVar[str] = "sliding_log"
    denial_holds_for_any_cost: ClassVar[bool] = False
    script: ClassVar[LuaScript] = SCRIPT

    def script_args(self, cost: int, commit: str) -> tuple[int, int, int, str]:
        return (self.rate.period_ms, self.rate.limit, cost, commit)

    def outcome(self, reply: Sequence[int]) -> Outcome:
        allowed, used, retry_ms, reset_ms = reply
        return Outcome(bool(allowed), max(self.rate.limit - used, 0), retry_ms, reset_ms)

    def reading(self, reply: Sequence[int]) -> Reading:
        used = int(reply[1])
        return Reading(self.outcome(reply), used, f"{used:,} entries in the log")
