"""Calendar quota: ``limit`` hits per day, week, month or year in a time zone.

State: one string counter per identity and period, ``<key>:<period start,
s since the epoch>``, with a TTL to an hour after the period's end (a denied
hit counts nowhere): 47 bytes of Redis memory net of the key name.

**One round trip, time zones in Python.** Where a period begins (00:00 local
on its first day, daylight saving included) needs the tz database, which Lua
in Redis does not have; the time a hit counts at is the Redis server's
(``CLOCK: "server"``) or this host's (``CLOCK: "app"``). So the app works out
the periods and the script picks among them by the time:

* ``CLOCK: "app"`` (or a time the caller gives, ``given_time.py``): the time
  is known here; the script is given it and the one period that holds it.
* the server's clock: the app cannot know the server's time exactly without a
  round trip, but it is close to an estimate: the node's ``ServerClock``
  bounds (learned from the ``now`` of every quota reply, no ``TIME`` of its
  own), else this host's clock. The script is given the period holding the
  estimate and its nearer neighbour (the one before in the first half of
  the period, else the one after), and picks the one holding its ``TIME``.
  Periods are at least 23 hours long, so any estimate within 11.5 hours of
  the server's clock finds it; a farther one (the very first hit against a
  server whose clock is days off) is answered -1 with the server's time, and
  asked again around it: two round trips, once per process and server.

The counter's TTL is set relative to ``now`` when the script creates it
(``PEXPIRE end - now + GRACE_MS``): on the server's clock, an hour after the
period's end; with ``CLOCK: "app"``, the time left in the period on this
host's clock, counted from when the server runs the script, so never less
whatever the skew between the two clocks, plus the hour. (Without it, a hit
that read this host's clock a moment before the end and reached the server
after the counter died would count in a fresh counter of the ended period:
one hit too many; so would an app server whose clock is behind.)
"""

from __future__ import annotations

import time
from collections.abc import Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from django_rl.algorithms.base import (
    Outcome,
    ParameterError,
    Reading,
    ReadReplies,
    algorithm_script,
    read_now,
)
from django_rl.algorithms.periods import PERIODS, Calendar, Span, time_zone
from django_rl.algorithms.static import StaticAlgorithm
from django_rl.backends.aio_node import aeval
from django_rl.backends.clock import ClockError, app_ms
from django_rl.core.reprs import short_repr

if TYPE_CHECKING:
    from redis.client import Pipeline

    from django_rl.backends.node import RedisNode
    from django_rl.backends.scripts import LuaScript

SCRIPT = algorithm_script("quota")

#: The most a quota's ``limit`` may be.
MAX_LIMIT = 1_000_000_000
#: How long a counter outlives its period, in ms (see quota.lua): an hour.
GRACE_MS = 3_600_000
#: Attempts at finding the server's period before a hit gives up (ClockError).
MAX_ATTEMPTS = 3
#: Each parameter's hint (the check's).
HINTS = {
    "limit": "Set 'limit' to a whole number from 0 (deny every hit) to 1,000,000,000.",
    "period": "Set 'period' to 'day', 'week', 'month' or 'year'.",
    "timezone": (
        "Set 'timezone' to an IANA time zone name such as 'Europe/London' or "
        "'America/New_York' (default: settings.TIME_ZONE); install the 'tzdata' package "
        "where the system has no tz database."
    ),
    "rate": (
        "A quota's 'rate' is a function of the request (a callable, or its dotted path) "
        "that returns the request's quota, '<count>' or '<count>/<period>' (e.g. "
        "'10000/month'), or None (no limit): a plan's quota. It takes the place of 'limit'."
    ),
    "anchor": (
        "'anchor' is the day of the month a 'month' period starts on (1-28, default 1) or "
        "the ISO weekday a 'week' starts on (1 = Monday ... 7 = Sunday, default 1); "
        "'day' and 'year' take none."
    ),
}
#: A hit's exchanges (``Quota._steps``): each yields KEYS, the parameters (the same for
#: every hit of a period: their encoding is kept, ``LuaScript.run``'s segments) and the
#: cost, ``"1"``/``"0"`` and the time; it is sent the reply.
Steps = Generator[tuple[list[str], tuple[int, ...], tuple[int | str, ...]], Any, Outcome]


class QuotaParameterError(ParameterError):
    """A quota parameter with a bad value; ``key`` names it, ``hint`` says what to write."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"[{key!r}] {message}")
        self.key = key
        self.hint = HINTS[key]


class Periodic(Outcome):
    """A quota's Outcome: ``window`` is the current period's length in seconds.

    Still a 4-tuple (it unpacks as an Outcome does); the window is an attribute.
    """

    window: int


def periodic(outcome: tuple[bool, int, int, int], span: Span) -> Periodic:
    made = Periodic(*outcome)
    made.window = span.seconds
    return made


def _calendar(spec: Mapping[str, Any]) -> Calendar:
    """Return the calendar ``spec`` describes; raise QuotaParameterError naming the key."""
    period = spec["period"]
    if period not in PERIODS:
        raise QuotaParameterError("period", f"is {short_repr(period)}, not a period")
    name = spec.get("timezone")
    if name is None:
        from django.conf import settings

        name = getattr(settings, "TIME_ZONE", None) or "UTC"
    try:
        zone = time_zone(name)
    except ValueError as exc:
        raise QuotaParameterError("timezone", f"is {short_repr(name)}: {exc}") from None
    anchor = spec.get("anchor")
    top = {"week": 7, "month": 28}.get(period)
    if anchor is not None and top is None:
        raise QuotaParameterError("anchor", f"is set, but a {period!r} period takes none")
    if anchor is None:
        anchor = 1
    elif isinstance(anchor, bool) or not isinstance(anchor, int) or not 1 <= anchor <= (top or 1):
        raise QuotaParameterError("anchor", f"is {short_repr(anchor)}, not 1 to {top}")
    return Calendar(period, zone, anchor)


def _limit(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LIMIT:
        raise QuotaParameterError("limit", f"is {short_repr(value)}, not 0 to {MAX_LIMIT:,}")
    return value


def calendar_of(spec: Mapping[str, Any], period: str) -> Calendar:
    """Return the calendar of ``period`` in a valid quota ``spec``'s time zone (its
    ``anchor`` if ``period`` is its own): a ``fallback_rate`` such as ``"500/month"``."""
    anchor = spec.get("anchor") if period == spec["period"] else None
    return _calendar({**spec, "period": period, "anchor": anchor})


def describe(limit: int, calendar: Calendar) -> str:
    text = f"quota {limit}/{calendar.period} {calendar.zone.key}"
    return text + (f" anchor {calendar.anchor}" if calendar.period in ("week", "month") else "")


def quota_rate(value: object, period: str) -> tuple[int, str]:
    """Return the limit and period of a quota's rate, ``'<count>'`` or ``'<count>/<period>'``.

    What a per-plan function (or an operator's rate override) gives a quota;
    without a period, the policy's ``period``.

    :raises QuotaParameterError: naming ``rate``.
    """
    if not isinstance(value, str):
        raise QuotaParameterError("rate", f"is {short_repr(value)}, not a quota such as '100/day'")
    count, _, unit = value.strip().partition("/")
    if not count.isdigit() or len(count) > 10 or (unit and unit not in PERIODS):
        raise QuotaParameterError("rate", f"is {short_repr(value)}, not a quota such as '100/day'")
    return int(count), unit or period


class Quota:
    name: ClassVar[str] = "quota"
    parameters: ClassVar[frozenset[str]] = frozenset(
        {"limit", "period", "timezone", "anchor", "rate"}
    )
    #: The parameters a spec may leave out.
    optional_parameters: ClassVar[frozenset[str]] = frozenset({"timezone", "anchor", "rate"})
    #: A required parameter another one stands for: a plan's ``rate`` function for ``limit``.
    alternatives: ClassVar[dict[str, str]] = {"limit": "rate"}
    #: What a rate function's policy is judged at (``spec.py``), as ``plans.SAMPLE_RATE``.
    sample_rate: ClassVar[str] = "1"
    # The counter only grows until the period ends (denied hits count nothing).
    denial_holds_for_any_cost: ClassVar[bool] = True
    state_version: ClassVar[int] = 1
    script: ClassVar[LuaScript] = SCRIPT

    def __init__(self, limit: int, calendar: Calendar) -> None:
        self._limit = limit
        self.calendar = calendar

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> Quota | StaticAlgorithm:
        """Build from ``spec``; a ``limit`` of 0 denies every hit without Redis.

        :raises QuotaParameterError: naming the bad key (a ParameterError).
        """
        if "rate" in spec:
            # A plan's quota (a rate function's answer) or a rate override's: it
            # stands for the policy's ``limit`` (and ``period``, if it names one).
            count, period = quota_rate(spec["rate"], spec["period"])
            limit, calendar = _limit(count), _calendar({**spec, "period": period})
        else:
            limit, calendar = _limit(spec["limit"]), _calendar(spec)
        return ClosedQuota(calendar) if limit == 0 else cls(limit, calendar)

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def description(self) -> str:
        return describe(self._limit, self.calendar)

    @property
    def rate_text(self) -> str:
        """The quota as the admin's and the command's listings show a rate: ``5000/month``."""
        return f"{self._limit}/{self.calendar.period}"

    # -- the periods a hit is sent with --------------------------------------

    def _candidates(self, node: RedisNode, given: str) -> list[Span]:
        """Return the periods the script may pick from (see the module's docstring)."""
        calendar = self.calendar
        if given:
            return [calendar.span(int(given))]
        estimate = node.clock.estimate_ms()
        if estimate is None:
            estimate = app_ms()
        span = calendar.span(estimate)
        if estimate - span.start < span.end - estimate:
            return [calendar.preceding(span), span]
        return [span, calendar.following(span)]

    def _arguments(self, key: str, spans: Sequence[Span]) -> tuple[list[str], tuple[int, ...]]:
        keys = [f"{key}:{span.start // 1000}" for span in spans]
        args = [self._limit, GRACE_MS]
        for span in spans:
            args += (span.start, span.end)
        return keys, tuple(args)

    def _read(
        self, node: RedisNode, reply: Sequence[int], given: str, sent: float, received: float
    ) -> Periodic | None:
        """Turn a reply into an Outcome; ``None``: no candidate held the server's time."""
        allowed, remaining, retry_ms, reset_ms, _, now, start, end = reply[:8]
        if not given:
            node.clock.observe(now, sent, received)
        if allowed < 0:
            return None
        return periodic((bool(allowed), remaining, retry_ms, reset_ms), Span(start, end))

    def _steps(self, node: RedisNode, key: str, cost: int, commit: str) -> Steps:
        """A hit's (or look's) exchanges: each yields KEYS and ARGV, is sent the reply."""
        for _ in range(MAX_ATTEMPTS):
            given = node.script_time()
            keys, args = self._arguments(key, self._candidates(node, given))
            sent = time.monotonic()
            reply = yield keys, args, (cost, commit, given)
            outcome = self._read(node, reply, given, sent, time.monotonic())
            if outcome is not None:
                return outcome
        raise ClockError(
            f"no current period found on the Redis server's clock in {MAX_ATTEMPTS} attempts"
        )

    def hit(self, node: RedisNode, key: str, cost: int) -> Outcome:
        steps = self._steps(node, key, cost, "1")
        try:
            keys, args, tail = next(steps)
            while True:
                reply = self.script.run(node.client, keys, (), (args, tail))
                keys, args, tail = steps.send(reply)
        except StopIteration as done:
            outcome: Outcome = done.value
            return outcome

    async def ahit(self, node: RedisNode, key: str, cost: int) -> Outcome:
        """:meth:`hit`, awaited: the same steps (:meth:`_steps`), the same scripts."""
        steps = self._steps(node, key, cost, "1")
        try:
            keys, args, tail = next(steps)
            while True:
                reply = await aeval(node, self.script, keys, (*args, *tail))
                keys, args, tail = steps.send(reply)
        except StopIteration as done:
            outcome: Outcome = done.value
            return outcome

    # -- looking -----------------------------------------------------------------

    def peek(self, node: RedisNode, key: str) -> Outcome:
        return read_now(self, node, key).outcome

    def queue_peek(self, pipe: Pipeline, node: RedisNode, key: str) -> ReadReplies:
        given = node.script_time()
        spans = self._candidates(node, given)
        keys, args = self._arguments(key, spans)
        self.script.queue(pipe, keys, (*args, 1, "0", given))
        sent = time.monotonic()

        def read(replies: Any) -> Reading:
            reply = next(replies)
            outcome = self._read(node, reply, given, sent, time.monotonic())
            if outcome is None:  # (the server's clock is far off: nothing to show yet)
                span = spans[0]
                outcome = periodic((True, self._limit, 0, 0), span)
                count = 0
            else:
                span = Span(reply[6], reply[7])
                count = reply[4]
            return Reading(outcome, count, self.period_text(span))

        return read

    def period_text(self, span: Span) -> str:
        """Return the period as people read it: its start and end in the policy's time zone."""
        calendar = self.calendar
        start, end = calendar.local(span.start), calendar.local(span.end)
        return (
            f"{calendar.period} {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} "
            f"({calendar.zone.key})"
        )

    def keys(self, node: RedisNode, key: str) -> list[str]:
        # The periods either side too: the server's clock may be on the other side of an end.
        span = self.calendar.span(node.now_ms())
        spans = [self.calendar.preceding(span), span, self.calendar.following(span)]
        return [f"{key}:{s.start // 1000}" for s in spans]

    # -- several policies together (together.lua) ---------------------------------

    def script_entry(self, node: RedisNode, key: str) -> tuple[list[str], tuple[int | str, ...]]:
        """Return the counters of the two periods nearest the time, and the parameters.

        ``together.lua`` reads the time once for every policy (``CLOCK: "app"``:
        read here again, so the period either side of it goes too).
        """
        estimate = app_ms() if node.app_clock else None
        spans = self._candidates(node, str(estimate) if estimate is not None else "")
        if estimate is not None:
            span = spans[0]
            near = self.calendar.preceding(span) if estimate - span.start < 1000 else None
            spans = [near, span] if near else [span, self.calendar.following(span)]
        keys, args = self._arguments(key, spans)
        return keys, tuple(args)

    def script_outcome(
        self, node: RedisNode, reply: Sequence[int], sent: float, received: float
    ) -> Outcome | None:
        return self._read(node, reply, "1" if node.app_clock else "", sent, received)


class ClosedQuota(StaticAlgorithm):
    """A quota of ``limit`` 0: every hit denied, without Redis, until the period's end.

    The period is this host's (no state, so no server's clock to follow).
    """

    name: ClassVar[str] = "deny_all"

    def __init__(self, calendar: Calendar) -> None:
        self.calendar = calendar

    @property  # (a value per moment, read-only)
    def outcome(self) -> Outcome:  # type: ignore[override]
        now = app_ms()
        span = self.calendar.span(now)
        return periodic((False, 0, span.end - now, span.end - now), span)

    @property
    def limit(self) -> int:
        return 0

    @property
    def description(self) -> str:
        return describe(0, self.calendar)

    @property
    def rate_text(self) -> str:
        return f"0/{self.calendar.period}"
