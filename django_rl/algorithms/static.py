"""Rates decided without Redis: ``None`` (no limit) and ``"0/<period>"`` (deny every hit).

Any algorithm's ``rate`` may be one of these; :func:`rate_or_static` turns
it into an algorithm whose answer never changes, so no state is kept and
Redis is never asked:

* ``rate: None`` -> :class:`Unlimited`: every hit is allowed. The front doors
  skip such a policy altogether (``Policy.hit_request`` returns ``None``, so
  no header names it), the way DRF's throttles treat a rate of ``None``.
* ``"0/<period>"`` -> :class:`DenyAll`: every hit is denied, with Retry-After
  the period (a client asking again later is denied again; the period is
  how long it is told to stay away). Its Decisions say ``limit=0``,
  ``remaining=0``.

They have no keys (``keys`` is empty), so the admin's live counters show
no rows for them and ``reset`` has nothing to delete.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from django_rl.algorithms.outcomes import Outcome, Reading, ReadReplies
from django_rl.core.rates import Rate, RateError, parse_rate
from django_rl.core.reprs import short_repr

if TYPE_CHECKING:
    from redis.client import Pipeline

    from django_rl.backends.node import RedisNode


class StaticAlgorithm:
    """The shared half of :class:`Unlimited` and :class:`DenyAll`: one outcome for every hit.

    Whatever algorithm the settings name, the policy's ``algorithm.name`` is
    ``unlimited`` or ``deny_all``: listings show what it does.
    """

    name: ClassVar[str]
    parameters: ClassVar[frozenset[str]] = frozenset({"rate"})
    denial_holds_for_any_cost: ClassVar[bool] = True
    state_version: ClassVar[int] = 1

    def __init__(self, outcome: Outcome) -> None:
        #: What every hit and every look is told.
        self.outcome = outcome

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> StaticAlgorithm:
        """Return the static algorithm of ``spec["rate"]``.

        :raises RateError: if the rate is not ``None`` or ``"0/<period>"``.
        """
        rate = rate_or_static(spec["rate"])
        if isinstance(rate, Rate):
            raise RateError(f"rate {short_repr(spec['rate'])} is neither None nor 0/<period>")
        return rate

    @property
    def limit(self) -> int:
        raise NotImplementedError("limit")

    @property
    def description(self) -> str:
        raise NotImplementedError("description")

    def hit(self, node: RedisNode | None, key: str, cost: int) -> Outcome:
        return self.outcome

    async def ahit(self, node: RedisNode | None, key: str, cost: int) -> Outcome:
        return self.outcome

    def peek(self, node: RedisNode | None, key: str) -> Outcome:
        return self.outcome

    def queue_peek(self, pipe: Pipeline, node: RedisNode, key: str) -> ReadReplies:
        reading = Reading(self.outcome, 0, "")
        return lambda replies: reading  # queues nothing, so reads no reply

    def keys(self, node: RedisNode, key: str) -> list[str]:
        return []

    def script_entry(self, node: RedisNode, key: str) -> tuple[list[str], tuple[int | str, ...]]:
        raise TypeError("a static rate is decided without Redis")

    def script_outcome(
        self, node: RedisNode, reply: Sequence[int], sent: float, received: float
    ) -> Outcome | None:
        raise TypeError("a static rate is decided without Redis")


class Unlimited(StaticAlgorithm):
    """``rate: None``: every hit is allowed.

    Its Decisions (of ``hit`` and ``peek``, not of the front doors, which skip
    it) say ``limit`` and ``remaining`` 0: no limit applies, so nothing is
    counted down (as when a per-plan rate function returns ``None``).
    """

    name: ClassVar[str] = "unlimited"
    #: No rate: the headers' quota window (``w``) does not apply.
    rate = None

    def __init__(self) -> None:
        super().__init__(Outcome(True, 0, 0, 0))

    @property
    def limit(self) -> int:
        return 0  # no quota; any cost is allowed (Policy does not check it against this)

    @property
    def description(self) -> str:
        return self.name


class DenyAll(StaticAlgorithm):
    """``"0/<period>"``: every hit is denied; Retry-After and reset are the period."""

    name: ClassVar[str] = "deny_all"

    def __init__(self, rate: Rate) -> None:
        super().__init__(Outcome(False, 0, rate.period_ms, rate.period_ms))
        self.rate = rate

    @property
    def limit(self) -> int:
        return 0

    @property
    def description(self) -> str:
        return f"{self.name} {self.rate}"


def rate_or_static(value: object) -> Rate | StaticAlgorithm:
    """Return the Rate ``value`` writes, or the static algorithm it stands for.

    :raises RateError: if ``value`` is neither ``None`` nor a valid rate string.
    """
    if value is None:
        return Unlimited()
    rate = parse_rate(value)
    return DenyAll(rate) if rate.denies_all else rate
