"""Fixed window: one counter per window, in one MULTI/EXEC.

State: a string counter per (identity, window), the window's index in the key.
One round trip: ``MULTI; INCRBY key cost; PEXPIREAT key <window end> NX;
PTTL key; EXEC``.

* Windows are numbered from the Redis server's clock (bounded locally, see
  ``ServerClock``), so app servers with skewed clocks agree on them. The
  local bound is never trusted blindly: the reply proves whether the hit
  landed in the server's current window, and a hit that did not is sent
  again (see ``FixedWindow.hit``), so no error of the estimate, and no step
  of the server's clock, lets a hit through uncounted.
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

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from django_rl.algorithms.base import Outcome, RateAlgorithm, Reading, ReadReplies, read_now
from django_rl.backends.clock import ClockError

if TYPE_CHECKING:
    from redis.client import Pipeline

    from django_rl.backends import RedisNode


#: Attempts at finding the server's current window before a hit gives up
#: (:class:`ClockError`). Each failed attempt moves the clock's bounds; the
#: second reads ``TIME`` afresh, so only a clock that keeps jumping uses them all.
MAX_ATTEMPTS = 4


class FixedWindow(RateAlgorithm):
    name: ClassVar[str] = "fixed_window"
    # The counter only grows until the window ends.
    denial_holds_for_any_cost: ClassVar[bool] = True

    def _window(self, node: RedisNode) -> int:
        return node.now_ms() // self.rate.period_ms

    def hit(self, node: RedisNode, key: str, cost: int) -> Outcome:
        """Count the hit in the server's current window; see the module's docstring.

        The window is numbered from a lower bound of the server's clock, and
        the reply says whether it was the right one: ``PTTL`` of a key that
        dies at the window's end is the server's time to the millisecond.

        * ``PTTL`` -2: the window had already ended on the server. ``INCRBY``
          recreated its key and ``PEXPIREAT`` (in the past) deleted it, so
          the hit counted nowhere: it is sent again in the next window. Never
          allowed uncounted.
        * ``PTTL`` above the period: the window has not begun on the server
          (its clock stepped back). The hit is taken back from it (``DECRBY``)
          in the same transaction that counts it in the right one.

        Both are rare (a window edge inside the clock's error, or a server
        clock that jumped); otherwise a hit is one round trip.
        """
        clock = node.clock
        period = self.rate.period_ms
        earliest = -1  # the lowest window the server may still be in
        undo: tuple[tuple[str, str, int], ...] = ()
        for attempt in range(MAX_ATTEMPTS):
            window = max(self._window(node), earliest)
            window_key = f"{key}:{window}"
            end = (window + 1) * period
            sent = time.monotonic()
            replies = node.client.transaction_replies(
                (
                    *undo,
                    ("INCRBY", window_key, cost),
                    ("PEXPIREAT", window_key, end, "NX"),
                    ("PTTL", window_key),
                )
            )
            received = time.monotonic()
            count, _, ttl_ms = replies[len(undo) :]
            undo = ()
            if ttl_ms == -2:
                clock.observe_at_least(end, received)
                earliest = window + 1
                if attempt:
                    # Still behind after one step forward: the server's clock
                    # may have jumped ahead by many windows. Read it.
                    clock.resync()
                continue
            if ttl_ms == -1:  # cannot follow PEXPIREAT NX; tells nothing of the clock
                ttl_ms = period
            else:
                clock.observe(end - ttl_ms, sent, received)
            if ttl_ms > period:
                undo = (("DECRBY", window_key, cost),)
                earliest = -1
                continue
            limit = self.rate.limit
            if count <= limit:
                return Outcome(True, limit - count, 0, ttl_ms)
            return Outcome(False, 0, max(ttl_ms, 1), ttl_ms)
        raise ClockError(
            f"no current window found on the Redis server's clock in {MAX_ATTEMPTS} attempts"
            + (" (a hit stays counted in a later window)" if undo else "")
        )

    def peek(self, node: RedisNode, key: str) -> Outcome:
        return read_now(self, node, key).outcome

    def queue_peek(self, pipe: Pipeline, node: RedisNode, key: str) -> ReadReplies:
        # The server's time is known within bounds (ServerClock): when they
        # straddle an edge, the server may be in either window. Read both;
        # the current one is the first that exists and has begun (its PTTL
        # is at most the period). Almost always the bounds are within one
        # window, and one is read.
        period = self.rate.period_ms
        low, high = node.now_range_ms()
        windows = range(low // period, min(high // period, low // period + 1) + 1)
        for candidate in windows:
            pipe.get(f"{key}:{candidate}")
            pipe.pttl(f"{key}:{candidate}")
        limit = self.rate.limit

        def read(replies: Iterator[Any]) -> Reading:
            count, ttl_ms = 0, 0
            for _ in windows:
                value, ttl = next(replies), next(replies)
                if value is not None and 0 <= ttl <= period and not count:
                    count, ttl_ms = int(value), ttl
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
