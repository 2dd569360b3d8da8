"""Sliding log: exact, no edge burst, memory proportional to the limit.

State: a ZSET per identity, one member per allowed unit of cost, scored by
the server time of the hit; ``sliding_log.lua`` does check-then-add in one
EVALSHA. Denied hits add nothing. Retry-After is the time until enough of the
oldest entries leave the window for this hit to fit.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from django_rl.algorithms.base import Outcome, Reading, ReadReplies, read_now
from django_rl.backends import LuaScript
from django_rl.rates import Rate, parse_rate

if TYPE_CHECKING:
    from redis.client import Pipeline

    from django_rl.backends import RedisNode

SCRIPT = LuaScript.from_package(__package__, "sliding_log.lua")


class SlidingLog:
    name: ClassVar[str] = "sliding_log"
    parameters: ClassVar[frozenset[str]] = frozenset({"rate"})
    denial_holds_for_any_cost: ClassVar[bool] = False

    def __init__(self, rate: Rate) -> None:
        self.rate = rate

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> SlidingLog:
        return cls(parse_rate(spec["rate"]))

    @property
    def limit(self) -> int:
        return self.rate.limit

    @property
    def description(self) -> str:
        return f"{self.name} {self.rate}"

    def _args(self, cost: int, commit: str) -> tuple[int, int, int, str]:
        return (self.rate.period_ms, self.rate.limit, cost, commit)

    def _outcome(self, reply: Sequence[int]) -> Outcome:
        allowed, used, retry_ms, reset_ms = reply
        return Outcome(bool(allowed), max(self.rate.limit - used, 0), retry_ms, reset_ms)

    def hit(self, node: RedisNode, key: str, cost: int) -> Outcome:
        return self._outcome(SCRIPT(node.client, (key,), self._args(cost, "1")))

    def peek(self, node: RedisNode, key: str) -> Outcome:
        return read_now(self, node, key).outcome

    def queue_peek(self, pipe: Pipeline, node: RedisNode, key: str) -> ReadReplies:
        SCRIPT.queue(pipe, (key,), self._args(1, "0"))

        def read(replies: Iterator[Any]) -> Reading:
            reply = next(replies)
            used = int(reply[1])
            return Reading(self._outcome(reply), used, f"{used:,} entries in the log")

        return read

    def keys(self, node: RedisNode, key: str) -> list[str]:
        return [key]
