"""Fixed window: one counter per window, in one MULTI/EXEC.

State: a string counter per (identity, window), the window's index in the key.
One round trip: ``MULTI; INCRBY key cost; PEXPIREAT key <window end> NX;
PTTL key; EXEC``.

* Windows are numbered from the Redis server's clock (estimated locally, see
  ``ServerClock``), so app servers with skewed clocks agree on them.
* ``PEXPIREAT ... NX`` pins the key's death to the window's end on the
  server's own clock, so ``PTTL`` is the exact time left and Retry-After is
  exact. ``NX`` sends it on every hit yet only sets a TTL that is missing, so
  a key that lost its TTL is healed by its next hit. (The naive ``INCR``, then
  ``EXPIRE`` only when the count is 1, leaves a counter with no TTL forever if
  the client dies between the two; MULTI makes the three one unit.)
* Counting policy: denied hits are counted too (the INCRBY comes before the
  comparison, which is what keeps this a plain MULTI with no script). With a
  constant cost this changes nothing, since a window that denied one hit
  denies the rest. With mixed costs, a denied heavy hit uses up the window's
  remainder; use ``sliding_log`` or ``token_bucket`` where costs vary.
* Up to 2x the limit can pass across a window edge: the price of one counter.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from django_rl.algorithms.base import Outcome, RateAlgorithm, Reading, ReadReplies, read_now

if TYPE_CHECKING:
    from redis.client import Pipeline

    from django_rl.backends import RedisNode


class FixedWindow(RateAlgorithm):
    name: ClassVar[str] = "fixed_window"
    # The counter only grows until the window ends.
    denial_holds_for_any_cost: ClassVar[bool] = True

    def _window(self, node: RedisNode) -> int:
        return node.now_ms() // self.rate.period_ms

    def hit(self, node: RedisNode, key: str, cost: int) -> Outcome:
        window = self._window(node)
        window_key = f"{key}:{window}"
        count, _, ttl_ms = node.client.transaction_replies(
            (
                ("INCRBY", window_key, cost),
                ("PEXPIREAT", window_key, (window + 1) * self.rate.period_ms, "NX"),
                ("PTTL", window_key),
            )
        )
        # PTTL is -2 only if the local clock estimate put this hit in a window
        # that had just ended on the server: PEXPIREAT in the past deleted it.
        ttl_ms = max(ttl_ms, 0)
        limit = self.rate.limit
        if count <= limit:
            return Outcome(True, limit - count, 0, ttl_ms)
        return Outcome(False, 0, max(ttl_ms, 1), ttl_ms)

    def peek(self, node: RedisNode, key: str) -> Outcome:
        return read_now(self, node, key).outcome

    def queue_peek(self, pipe: Pipeline, node: RedisNode, key: str) -> ReadReplies:
        window_key = f"{key}:{self._window(node)}"
        pipe.get(window_key)
        pipe.pttl(window_key)
        limit = self.rate.limit

        def read(replies: Iterator[Any]) -> Reading:
            count = int(next(replies) or 0)
            ttl_ms = next(replies)
            ttl_ms = max(ttl_ms, 0) if count else 0
            if count < limit:
                outcome = Outcome(True, limit - count, 0, ttl_ms)
            else:
                outcome = Outcome(False, 0, max(ttl_ms, 1), ttl_ms)
            over = f"{count - limit:,} over the limit (denied hits count too)"
            return Reading(outcome, count, over if count > limit else "")

        return read

    def keys(self, node: RedisNode, key: str) -> list[str]:
        # The neighbours too: the local clock estimate may sit a hair on the
        # other side of an edge from where an earlier hit counted.
        window = self._window(node)
        return [f"{key}:{w}" for w in (window - 1, window, window + 1)]
