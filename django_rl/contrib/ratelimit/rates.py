"""django-ratelimit's rates: ``"5/m"``, ``"100/5m"``, ``"100/300"``, tuples, callables.

Parsed as the original parses them (:func:`_split_rate`), then turned into
django_rl's :class:`~django_rl.core.rates.Rate`, whose text names the state's
keys: ``"100/5m"`` and ``"100/300s"`` are one rate and share one count.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from django_rl.core.rates import MAX_COUNT, MAX_PERIOD_MS, Rate

#: Seconds per unit.
_PERIODS = {"s": 1, "m": 60, "h": 60 * 60, "d": 24 * 60 * 60}

#: ``<count>/<multiplier?><unit?>``, matched at the start of the text, as the original does.
rate_re = re.compile(r"([\d]+)/([\d]*)([smhd])?")


def _split_rate(rate: str | tuple[int, int]) -> tuple[int, int]:
    """Return ``(count, seconds)`` of a rate string; a tuple is returned as it is.

    A missing unit means seconds (``"100/300"``); the multiplier multiplies
    the unit (``"100/5m"`` is ``(100, 300)``). Like the original, only the
    start of the text is read: ``"5/M"`` is ``(5, 1)``.

    :raises AttributeError: for text that does not start like a rate (as the original).
    """
    if isinstance(rate, tuple):
        return rate
    match = rate_re.match(rate)
    if match is None:
        raise AttributeError(f"rate {rate!r} is not of the form '<count>/<period>', e.g. '5/m'")
    count, multiplier, unit = match.groups()
    seconds = _PERIODS[(unit or "s").lower()]
    if multiplier:
        seconds *= int(multiplier)
    return int(count), seconds


def rate_for(group: str, request: Any, rate: object) -> str | tuple[int, int] | None:
    """Return the rate that applies: ``rate``, or what the callable it is (or names) returns.

    A string with a ``.`` is a dotted path to ``callable(group, request)``.
    """
    if callable(rate):
        found: Any = rate(group, request)
        return found  # type: ignore[no-any-return]
    if isinstance(rate, str) and "." in rate:
        found = import_string(rate)(group, request)
        return found  # type: ignore[no-any-return]
    return rate  # type: ignore[return-value]


@functools.lru_cache(maxsize=1024)
def to_rate(rate: str | tuple[int, int]) -> Rate:
    """Return ``rate`` as django_rl's :class:`Rate` (a count of 0 denies every hit).

    Kept per rate (a few per project): this runs on every decision.

    :raises ImproperlyConfigured: for a period of 0 (as the original), and
        for counts and periods django_rl does not keep (above 1,000,000,000
        hits, or 366 days).
    """
    count, seconds = _split_rate(rate)
    if seconds <= 0:
        raise ImproperlyConfigured("Ratelimit period must be greater than 0")
    if not 0 <= count <= MAX_COUNT or seconds * 1000 > MAX_PERIOD_MS:
        raise ImproperlyConfigured(
            f"Ratelimit rate {rate!r} is out of range: django_rl counts 0 to {MAX_COUNT:,} "
            "hits per 1 second to 366 days"
        )
    return Rate(limit=int(count), period_ms=int(seconds) * 1000)
