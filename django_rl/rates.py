"""Rate strings: ``"<count>/<period>"``, e.g. ``"5/m"`` or ``"100/10m"``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from django_rl.reprs import short_repr

UNIT_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}

#: Limits keep every count and time in the Lua scripts an exact integer
#: (doubles are exact below 2**53).
MAX_COUNT = 1_000_000_000
MAX_PERIOD_MS = 366 * UNIT_MS["d"]

_RATE = re.compile(r"(?P<count>[0-9]+)/(?P<multiplier>[0-9]*)(?P<unit>[A-Za-z]*)")


class RateError(ValueError):
    """A rate string that does not parse; the message says what is wrong."""


@dataclass(frozen=True)
class Rate:
    """``limit`` hits per ``period_ms`` milliseconds."""

    limit: int
    period_ms: int

    @property
    def period(self) -> float:
        """Return the period in seconds."""
        return self.period_ms / 1000

    def __str__(self) -> str:
        for unit, ms in reversed(UNIT_MS.items()):
            if self.period_ms % ms == 0:
                multiplier = self.period_ms // ms
                return f"{self.limit}/{multiplier if multiplier > 1 else ''}{unit}"
        raise AssertionError("periods are whole seconds")  # pragma: no cover


def parse_rate(text: object) -> Rate:
    """Parse ``"<count>/[<multiplier>]<unit>"`` with unit ``s``, ``m``, ``h`` or ``d``.

    :raises RateError: for anything else: ``"5/mango"``, ``"five/m"``,
        ``"0/m"``, ``"5/0s"``, ``"5/min"``, a non-string, and counts or
        periods beyond the limits (however many digits they have).
    """
    if not isinstance(text, str):
        raise RateError(f"rate must be a string such as '5/m', not {short_repr(text)}")
    match = _RATE.fullmatch(text)
    if match is None:
        raise RateError(
            f"rate {short_repr(text)} is not of the form '<count>/<period>', "
            "e.g. '5/m' or '100/10m'"
        )
    unit = match["unit"]
    if unit not in UNIT_MS:
        raise RateError(
            f"rate {short_repr(text)} has an unknown period unit {short_repr(unit)}; "
            "use s, m, h or d (optionally with a multiplier, e.g. '100/10m')"
        )
    count = _whole(match["count"], MAX_COUNT)
    multiplier = _whole(match["multiplier"], MAX_PERIOD_MS) if match["multiplier"] else 1
    if not 1 <= count <= MAX_COUNT:
        raise RateError(f"rate {short_repr(text)} must allow between 1 and {MAX_COUNT:,} hits")
    period_ms = multiplier * UNIT_MS[unit]
    if not multiplier >= 1 or period_ms > MAX_PERIOD_MS:
        raise RateError(f"rate {short_repr(text)} must have a period between 1s and 366d")
    return Rate(limit=count, period_ms=period_ms)


def _whole(digits: str, most: int) -> int:
    """Return the number ``digits`` write, or ``most + 1`` for any above ``most``.

    Never ``int()`` of the whole text: Python refuses more than 4,300 digits
    (``ValueError``), and a rate of thousands of digits is still just too big.
    """
    significant = digits.lstrip("0")
    if len(significant) > len(str(most)):
        return most + 1
    return int(significant or "0")
