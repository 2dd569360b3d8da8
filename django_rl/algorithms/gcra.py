"""GCRA (generic cell rate algorithm): a token bucket's behaviour in one integer.

State: one string per identity holding the *theoretical arrival time* (TAT)
of the next hit; the key lives until that time and is then gone, so an idle
identity costs nothing. ``rate`` is the sustained rate (``"10/s"``: one hit
every 100 ms); ``burst`` is how many hits may come at once. A hit of cost c
is allowed when, after moving the TAT c emission intervals on, it is at
most ``burst`` intervals ahead of now; denied hits change nothing.

It answers as a token bucket of capacity ``burst`` refilled at ``rate``
would, with no float anywhere: ``gcra.lua`` counts time in units of
``1 / S`` ms where ``S = limit / gcd(limit, period_ms)``, so the emission
interval is a whole number of units for every rate, and the stored value
is kept below 2^52 by storing it modulo ``W * S`` (see the script). Retry-After
is exact to the millisecond (rounded up), from the server's clock.
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

SCRIPT = algorithm_script("gcra")

#: The stored value and every sum the script makes stay below this (Lua's
#: doubles are exact below 2^53).
MAX_UNITS = 2**52


class Gcra(BucketAlgorithm, ScriptAlgorithm):
    name: ClassVar[str] = "gcra"
    parameters: ClassVar[frozenset[str]] = frozenset({"rate", "burst"})
    size_parameter: ClassVar[str] = "burst"
    # A denied heavy hit says nothing of a light one.
    denial_holds_for_any_cost: ClassVar[bool] = False
    script: ClassVar[LuaScript] = SCRIPT

    def __init__(self, burst: int, rate: Rate) -> None:
        burst = whole_count("burst", burst)
        common = math.gcd(rate.limit, rate.period_ms)
        #: Units per millisecond, and the emission interval in units.
        self.units_per_ms = rate.limit // common
        self.interval = rate.period_ms // common
        #: The wrap of the stored value, in ms: the largest power of two that
        #: keeps ``wrap_ms * units_per_ms`` within MAX_UNITS.
        self.wrap_ms = 1 << (MAX_UNITS // self.units_per_ms).bit_length() - 1
        self.tolerance = burst * self.interval
        # The TAT's lead on now must be told apart from a lag after the value
        # wraps: a quarter of the wrap leaves room for a clock step as large.
        if self.tolerance > self.wrap_ms * self.units_per_ms // 4:
            raise ParameterError(
                f"burst {burst} at {rate} spans "
                f"{burst * rate.period_ms / rate.limit / 1000:,.0f}s, too long to count exactly; "
                "use a smaller burst or a higher rate"
            )
        self.burst = burst
        self.rate = rate

    @property
    def limit(self) -> int:
        return self.burst

    @property
    def description(self) -> str:
        return f"{self.name} {self.rate} burst {self.burst}"

    def script_args(self, cost: int, commit: str) -> tuple[int, int, int, int, int, str]:
        return (
            self.interval,
            self.tolerance,
            self.units_per_ms,
            self.wrap_ms,
            cost,
            commit,
        )

    def outcome(self, reply: Sequence[int]) -> Outcome:
        allowed, remaining, retry_ms, reset_ms = reply[:4]
        return new_tuple(Outcome, (bool(allowed), remaining, retry_ms, reset_ms))

    def reading(self, reply: Sequence[int]) -> Reading:
        # Hits' worth of the burst in use: fractional while it drains.
        used = round(reply[4] / self.interval, 6)
        left = math.floor((self.burst - used) * 10) / 10  # never fuller than it is
        return Reading(self.outcome(reply), used, f"{left:g} of {self.burst} burst left")
