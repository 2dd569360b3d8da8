"""What an algorithm answers: an Outcome per hit, a Reading per look (``peek``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, Protocol, TypeVar, cast


class Outcome(NamedTuple):
    """An algorithm's answer, before the policy turns it into a Decision."""

    allowed: bool
    remaining: int
    retry_after_ms: int
    reset_after_ms: int


_T = TypeVar("_T")


class _NewTuple(Protocol):
    def __call__(self, cls: type[_T], fields: tuple[Any, ...], /) -> _T: ...


#: ``new_tuple(Outcome, (allowed, remaining, retry_after_ms, reset_after_ms))``:
#: an Outcome (or any NamedTuple) without the Python frame of its generated
#: ``__new__``; the algorithms make one per decision. ``tuple.__new__`` itself.
new_tuple = cast(_NewTuple, tuple.__new__)


class Reading(NamedTuple):
    """What ``peek`` sees, with the state behind it, for people to look at.

    :ivar outcome: what a hit of cost 1 would be told now.
    :ivar used: how much of the limit is taken now: hits counted in the
        window (``fixed_window``; denied hits count too, so it can pass the
        limit), units of cost in the log (``sliding_log``), tokens taken
        (``token_bucket``; fractional while the bucket refills).
    :ivar detail: the state in a few words where the numbers do not say it
        all (tokens left, entries in the log, denied hits counted), or ``""``.
    """

    outcome: Outcome
    used: float
    detail: str
    #: Seconds left in the identity's block (``block_for``, ``escalate``, ``block()``); 0: none.
    blocked: float = 0.0


#: Turns the replies of the commands ``queue_peek`` queued into a Reading. It
#: takes an iterator over a pipeline's replies and consumes exactly its own.
ReadReplies = Callable[[Iterator[Any]], Reading]
