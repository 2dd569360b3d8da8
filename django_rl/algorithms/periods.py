"""Calendar periods in a time zone: where the period holding a time begins and ends.

A period begins at 00:00 local time on its first day: every day (``day``),
the ``anchor`` ISO weekday (``week``, 1 = Monday), the ``anchor`` day of the
month (``month``, 1-28, so every month has it), 1 January (``year``). Its
end is the next period's beginning, so a day is 23 or 25 hours long where
daylight saving starts or ends, a month 28 to 31 days.

Times are whole milliseconds since the epoch (UTC), as the algorithms keep
them; the arithmetic is ``zoneinfo``'s (the system's tz database, else the
``tzdata`` package). Where 00:00 does not exist (a zone that moves its
clocks forward at midnight), the day begins at the first instant it has,
the moment of the change; where 00:00 happens twice, at the first.
"""

from __future__ import annotations

import datetime as dt
from typing import NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

PERIODS = ("day", "week", "month", "year")

_ONE_DAY = dt.timedelta(days=1)


class Span(NamedTuple):
    """One period: ``start <= t < end``, in ms since the epoch."""

    start: int
    end: int

    @property
    def seconds(self) -> int:
        """The period's length in whole seconds (a day: 82,800, 86,400 or 90,000)."""
        return (self.end - self.start) // 1000


def time_zone(name: object) -> ZoneInfo:
    """Return the IANA time zone ``name``.

    :raises ValueError: if it is not a name, or no such zone is known.
    """
    if not isinstance(name, str) or not name or name != name.strip():
        raise ValueError("not a time zone name")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise ValueError(f"unknown time zone ({exc.__class__.__name__})") from None


class Calendar:
    """The periods of one kind (``period``, ``anchor``) in one time zone."""

    def __init__(self, period: str, zone: ZoneInfo, anchor: int) -> None:
        if period not in PERIODS:
            raise ValueError(f"period must be one of {', '.join(PERIODS)}")
        self.period = period
        self.zone = zone
        self.anchor = anchor
        # The last span asked for: nearly every call is inside it.
        self._last = self._following = self._preceding = Span(0, 0)

    def span(self, ms: int) -> Span:
        """Return the period holding ``ms`` (ms since the epoch)."""
        last = self._last
        if last.start <= ms < last.end:
            return last
        first = self._first_day(dt.datetime.fromtimestamp(ms // 1000, self.zone).date())
        span = Span(self._midnight(first), self._midnight(self._next_first_day(first)))
        if not span.start <= ms < span.end:  # (a zone's midnight moved by a change of rules)
            span = Span(min(span.start, ms), max(span.end, ms + 1))
        self._last = span  # one assignment: threads see a whole span
        return span

    def following(self, span: Span) -> Span:
        """Return the period after ``span`` (the last answer kept: asked on most hits)."""
        kept = self._following
        if kept.start == span.end:
            return kept
        first = dt.datetime.fromtimestamp(span.end // 1000, self.zone).date()
        kept = self._following = Span(span.end, self._midnight(self._next_first_day(first)))
        return kept

    def preceding(self, span: Span) -> Span:
        """Return the period before ``span`` (the last answer kept, as :meth:`following`)."""
        kept = self._preceding
        if kept.end == span.start:
            return kept
        first = self._first_day(
            dt.datetime.fromtimestamp((span.start - 1) // 1000, self.zone).date()
        )
        kept = self._preceding = Span(self._midnight(first), span.start)
        return kept

    def local(self, ms: int) -> dt.datetime:
        """Return ``ms`` as a time in this calendar's zone (to show people)."""
        return dt.datetime.fromtimestamp(ms / 1000, self.zone)

    def _first_day(self, day: dt.date) -> dt.date:
        """Return the first day of the period holding the local date ``day``."""
        period = self.period
        if period == "day":
            return day
        if period == "week":
            return day - dt.timedelta(days=(day.isoweekday() - self.anchor) % 7)
        if period == "month":
            if day.day >= self.anchor:
                return day.replace(day=self.anchor)
            year, month = (day.year, day.month - 1) if day.month > 1 else (day.year - 1, 12)
            return dt.date(year, month, self.anchor)
        return dt.date(day.year, 1, 1)

    def _next_first_day(self, first: dt.date) -> dt.date:
        period = self.period
        if period == "day":
            return first + _ONE_DAY
        if period == "week":
            return first + dt.timedelta(days=7)
        if period == "month":
            year, month = (first.year, first.month + 1) if first.month < 12 else (first.year + 1, 1)
            return dt.date(year, month, first.day)
        return dt.date(first.year + 1, 1, 1)

    def _midnight(self, day: dt.date) -> int:
        """Return the first instant of the local date ``day``, in ms since the epoch."""
        zone = self.zone
        start = dt.datetime(day.year, day.month, day.day, tzinfo=zone)
        ms = int(start.timestamp()) * 1000
        # 00:00 may not exist (clocks moved forward at midnight): fold 0 then
        # reads it with the offset before the change, an instant that is
        # already the previous day or the change itself. Step to the change.
        if dt.datetime.fromtimestamp(ms // 1000, zone).date() != day:
            low, high = ms, ms + 2 * 3_600_000
            while high - low > 1000:
                mid = (low + high) // 2 // 1000 * 1000
                if dt.datetime.fromtimestamp(mid // 1000, zone).date() < day:
                    low = mid
                else:
                    high = mid
            ms = high
        return ms
