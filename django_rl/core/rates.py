"""Rate strings: ``"<count>/<period>"``: ``"5/m"``, ``"100/10m"``, ``"1000/hour"``, ``"100/10"``.

The period is an optional whole multiplier and a unit: ours (``s``, ``m``,
``h``, ``d``), DRF's words (``sec``, ``second``, ``min``, ``minute``,
``hour``, ``day``, and their plurals), ``w``/``week`` (7 days), or no unit
at all (``"100/10"``: 100 per 10 seconds, django-ratelimit's form). A count
of 0 (``"0/m"``) is a rate that denies every request. Units are matched
whole and in lower case: ``"5/mango"`` and ``"5/M"`` are errors, not
``"5/m"`` (DRF reads only a unit's first letter; see docs/settings.md).

A policy's ``rate`` may also be ``None``: no limit at all. That is the
algorithms' business (``algorithms/static.py``); this module parses strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django_rl.core.reprs import short_repr

#: The units a rate is written back in (``str(rate)``): a rate's text is part
#: of its keys' fingerprint, so it must not change for rates that parsed before.
UNIT_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
WEEK_MS = 7 * UNIT_MS["d"]

#: Every unit a rate may be written with, and its length.
UNIT_WORDS: dict[str, int] = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), UNIT_MS["s"]),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), UNIT_MS["m"]),
    **dict.fromkeys(("h", "hour", "hours"), UNIT_MS["h"]),
    **dict.fromkeys(("d", "day", "days"), UNIT_MS["d"]),
    **dict.fromkeys(("w", "week", "weeks"), WEEK_MS),
}
#: How error messages list the units.
UNITS_TEXT = (
    "s, sec, second, m, min, minute, h, hour, d, day, w, week (plurals too), "
    "or no unit for seconds ('100/10')"
)

#: Limits keep every count and time in the Lua scripts an exact integer
#: (doubles are exact below 2**53).
MAX_COUNT = 1_000_000_000
MAX_PERIOD_MS = 366 * UNIT_MS["d"]

_RATE = re.compile(r"(?P<count>[0-9]+)/(?P<multiplier>[0-9]*)(?P<unit>[A-Za-z]*)")


class RateError(ValueError):
    """A rate string that does not parse; the message says what is wrong."""


@dataclass(frozen=True)
class Rate:
    """``limit`` hits per ``period_ms`` milliseconds; a ``limit`` of 0 denies every hit."""

    limit: int
    period_ms: int

    @property
    def period(self) -> float:
        """Return the period in seconds."""
        return self.period_ms / 1000

    @property
    def denies_all(self) -> bool:
        """Return whether this rate allows nothing (``"0/<period>"``)."""
        return self.limit == 0

    def __str__(self) -> str:
        for unit, ms in reversed(UNIT_MS.items()):
            if self.period_ms % ms == 0:
                multiplier = self.period_ms // ms
                return f"{self.limit}/{multiplier if multiplier > 1 else ''}{unit}"
        raise AssertionError("periods are whole seconds")  # pragma: no cover


def parse_rate(text: object) -> Rate:
    """Parse ``"<count>/[<multiplier>]<unit>"``, or ``"<count>/<seconds>"``.

    ``count`` is 0 (deny everything) to :data:`MAX_COUNT`; the period is 1
    second to 366 days; units are those of :data:`UNIT_WORDS`.

    :raises RateError: for anything else: ``"5/mango"``, ``"5/M"``, ``"5/"``,
        ``"five/m"``, ``"5/0s"``, ``"5 / m"``, a non-string, and counts or
        periods beyond the limits (however many digits they have).
    """
    if not isinstance(text, str):
        raise RateError(f"rate must be a string such as '5/m', not {short_repr(text)}")
    match = _RATE.fullmatch(text)
    if match is None:
        raise RateError(
            f"rate {short_repr(text)} is not of the form '<count>/<period>', "
            "e.g. '5/m', '100/10m' or '1000/hour'"
        )
    unit, multiplier_digits = match["unit"], match["multiplier"]
    if not unit and not multiplier_digits:
        raise RateError(
            f"rate {short_repr(text)} has no period; write e.g. '5/m', "
            "or '5/10' for 5 per 10 seconds"
        )
    unit_ms = UNIT_WORDS.get(unit, 0) if unit else UNIT_MS["s"]
    if not unit_ms:
        if unit.lower() in UNIT_WORDS:
            why = " (units are lower case)"
        elif unit[0] in UNIT_WORDS:  # "5/month", "5/hr": DRF reads the first letter only
            why = " (whole words are read, not the first letter)"
        else:
            why = ""
        raise RateError(
            f"rate {short_repr(text)} has an unknown period unit {short_repr(unit)}{why}; "
            f"use {UNITS_TEXT}"
        )
    count = _whole(match["count"], MAX_COUNT)
    multiplier = _whole(multiplier_digits, MAX_PERIOD_MS) if multiplier_digits else 1
    if count > MAX_COUNT:
        raise RateError(f"rate {short_repr(text)} must allow at most {MAX_COUNT:,} hits")
    period_ms = multiplier * unit_ms
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
