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
* Redis 6.2 has no ``NX`` (it came with 7.0; the node learns which the
  server has, see ``backends/capabilities.py``). There the same transaction
  sends plain ``PEXPIREAT``: every writer of a window sets the same absolute
  expiry, its end, so setting it again on every hit changes nothing but the
  replication traffic (one more command per hit), and heals a lost TTL all
  the same.
* With ``CLOCK: "app"`` (servers that refuse ``TIME`` in scripts, see
  :meth:`FixedWindow.hit`), windows are numbered from this host's clock
  and the expiry is relative: ``PEXPIRE key <time left on this host's
  clock>``. ``PEXPIREAT`` with an end read on this host's clock would be
  wrong by the skew between this host and the server: a server ahead would
  delete a counter before its window ends here (and one ahead by more than
  the time left would delete it at once: no hit would ever count), letting
  hits through. A relative TTL is measured on the server from when the
  command arrives, so the counter lives at least until the window ends on
  this host's clock, whatever the skew, and at most one round trip longer.
* Counting policy: denied hits are counted too (the INCRBY comes before the
  comparison, which is what keeps this a plain MULTI with no script). With a
  constant cost this changes nothing, since a window that denied one hit
  denies the rest. With mixed costs, a denied heavy hit uses up the window's
  remainder; use ``sliding_log`` or ``token_bucket`` where costs vary.
* Up to 2x the limit can pass across a window edge: the price of one counter.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from django_rl.algorithms.base import (
    Outcome,
    RateAlgorithm,
    Reading,
    ReadReplies,
    new_tuple,
    read_now,
)
from django_rl.backends.aio_node import arun_transaction, atransaction
from django_rl.backends.clock import ClockError
from django_rl.backends.resp import KEY, Slot, Transaction

if TYPE_CHECKING:
    from redis.client import Pipeline

    from django_rl.backends.node import RedisNode


#: Attempts at finding the server's current window before a hit gives up
#: (:class:`ClockError`). Each failed attempt moves the clock's bounds; the
#: second reads ``TIME`` afresh, so only a clock that keeps jumping uses them all.
MAX_ATTEMPTS = 4


_COST, _END = Slot("cost"), Slot("end")
#: The hit's transaction, its slots the window's key, the cost and the
#: window's end: ``MULTI; INCRBY; PEXPIREAT [NX]; PTTL; EXEC``.
HIT_NX = Transaction([("INCRBY", KEY, _COST), ("PEXPIREAT", KEY, _END, "NX"), ("PTTL", KEY)])
HIT = Transaction([("INCRBY", KEY, _COST), ("PEXPIREAT", KEY, _END), ("PTTL", KEY)])

#: A hit's steps (``FixedWindow._hit_steps``): yields ``(transaction or None,
#: values or commands)``, is sent the replies, returns the Outcome.
Steps = Generator[tuple[Transaction | None, Sequence[Any]], list[Any], Outcome]


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
        first = None
        if not node.app_clock:
            # The usual hit, read here (_usual): no generator on every decision.
            counting, window, filling = self._attempt(node, cost)
            sent = time.monotonic()
            replies = node.client.run_transaction(counting, f"{key}:{window}", filling)
            first = (window, sent, time.monotonic(), replies)
            usual = self._usual(node, first)
            if usual is not None:
                return usual
        steps = self._hit_steps(node, key, cost, first)
        try:
            exchange = next(steps)
            while True:
                transaction, values = exchange
                client = node.client
                if transaction is not None:
                    exchange = steps.send(client.run_transaction(transaction, *values))
                else:
                    exchange = steps.send(client.transaction_replies(values))
        except StopIteration as done:
            outcome: Outcome = done.value
            return outcome

    async def ahit(self, node: RedisNode, key: str, cost: int) -> Outcome:
        """:meth:`hit`, awaited: the same steps (:meth:`_hit_steps`), the same transactions."""
        first = None
        if not node.app_clock:
            counting, window, filling = self._attempt(node, cost)
            sent = time.monotonic()
            replies = await arun_transaction(node, counting, f"{key}:{window}", filling)
            first = (window, sent, time.monotonic(), replies)
            usual = self._usual(node, first)
            if usual is not None:
                return usual
        steps = self._hit_steps(node, key, cost, first)
        try:
            exchange = next(steps)
            while True:
                transaction, values = exchange
                if transaction is None:
                    exchange = steps.send(await atransaction(node, values))
                else:
                    key_of, filling = values
                    exchange = steps.send(
                        await arun_transaction(node, transaction, key_of, filling)
                    )
        except StopIteration as done:
            outcome: Outcome = done.value
            return outcome

    def _hit_steps(
        self,
        node: RedisNode,
        key: str,
        cost: int,
        first: tuple[int, float, float, list[Any]] | None = None,
    ) -> Steps:
        """:meth:`hit`'s steps: each yields one MULTI/EXEC and is sent its replies.

        A yield is ``(transaction, values)`` (a ``resp.Transaction`` and the
        values of its slots) or ``(None, commands)``; the sync and the async
        driver only make the exchange. ``first``: the first attempt, made
        and not :meth:`_usual` (its window, the times sent and received, its
        replies).
        """
        if node.app_clock:
            return (yield from self._hit_by_app_clock(node, key, cost))
        clock = node.clock
        period = self.rate.period_ms
        hit = HIT_NX if node.capabilities.expire_nx else HIT
        earliest = -1  # the lowest window the server may still be in
        undo: list[tuple[str, str, int]] = []
        for attempt in range(MAX_ATTEMPTS):
            if first is not None:
                window, sent, received, replies = first
                window_key = f"{key}:{window}"
                end = (window + 1) * period
                first = None
            else:
                window = max(node.server_now_ms() // period, earliest)  # (not app_clock: above)
                window_key = f"{key}:{window}"
                end = (window + 1) * period
                sent = time.monotonic()
                if not undo:
                    replies = yield hit, (window_key, (cost, end))
                else:
                    replies = yield None, [*undo, *hit.filled(window_key, (cost, end))]
                received = time.monotonic()
            count, _, ttl_ms = replies[len(undo) :]
            undo = []
            if ttl_ms == -2:
                clock.observe_at_least(end, received)
                earliest = window + 1
                if attempt:
                    # Still behind after one step forward: the server's clock
                    # may have jumped ahead by many windows. Read it.
                    clock.resync()
                continue
            if ttl_ms == -1:  # cannot follow PEXPIREAT; tells nothing of the clock
                ttl_ms = period
            else:
                clock.observe(end - ttl_ms, sent, received)
            if ttl_ms > period:
                undo = [("DECRBY", window_key, cost)]
                earliest = -1
                continue
            return self._outcome(count, ttl_ms)
        raise ClockError(
            f"no current window found on the Redis server's clock in {MAX_ATTEMPTS} attempts"
            + (" (a hit stays counted in a later window)" if undo else "")
        )

    def _attempt(self, node: RedisNode, cost: int) -> tuple[Transaction, int, tuple[int, int]]:
        """The first attempt (server's clock): its transaction, window and slots' values."""
        period = self.rate.period_ms
        window = node.server_now_ms() // period
        transaction = HIT_NX if node.capabilities.expire_nx else HIT
        return transaction, window, (cost, (window + 1) * period)

    def _usual(self, node: RedisNode, first: tuple[int, float, float, list[Any]]) -> Outcome | None:
        """The first attempt's Outcome if it counted in the server's window (the usual hit).

        ``None``: the window had ended or not begun on the server, or it cannot
        follow ``PEXPIREAT``; :meth:`_hit_steps` goes on from ``first``.
        """
        window, sent, received, (count, _, ttl_ms) = first
        period = self.rate.period_ms
        if not 0 <= ttl_ms <= period:
            return None
        node.clock.observe((window + 1) * period - ttl_ms, sent, received)
        return self._outcome(count, ttl_ms)

    def _outcome(self, count: int, ttl_ms: int) -> Outcome:
        """The Outcome of a hit counted ``count``-th in a window with ``ttl_ms`` left."""
        limit = self.rate.limit
        if count <= limit:
            return new_tuple(Outcome, (True, limit - count, 0, ttl_ms))
        return new_tuple(Outcome, (False, 0, max(ttl_ms, 1), ttl_ms))

    def _hit_by_app_clock(self, node: RedisNode, key: str, cost: int) -> Steps:
        """Count the hit in the window of this host's clock (``CLOCK: "app"``).

        ``PEXPIRE`` with the time left in the window (see the module's
        docstring): from 1 ms to the period, so the key is never deleted by
        it and no hit goes uncounted. With ``NX`` (Redis 7.0+) the first hit
        of a window sets the TTL; without it every hit sets it again, to the
        same end give or take its own round trip.
        """
        period = self.rate.period_ms
        now = node.now_ms()
        window = now // period
        window_key = f"{key}:{window}"
        end = (window + 1) * period
        nx = ("NX",) if node.capabilities.expire_nx else ()
        count, _ = yield (
            None,
            (("INCRBY", window_key, cost), ("PEXPIRE", window_key, end - now, *nx)),
        )
        # The time left in this host's window: what Retry-After is about.
        left = max(end - node.now_ms(), 1)
        limit = self.rate.limit
        if count <= limit:
            return new_tuple(Outcome, (True, limit - count, 0, left))
        return new_tuple(Outcome, (False, 0, left, left))

    def peek(self, node: RedisNode, key: str) -> Outcome:
        return read_now(self, node, key).outcome

    def queue_peek(self, pipe: Pipeline, node: RedisNode, key: str) -> ReadReplies:
        # The server's time is known within bounds (ServerClock): when they
        # straddle an edge, the server may be in either window. Read both;
        # the current one is the first that exists and has begun (its PTTL
        # is at most the period). Almost always the bounds are within one
        # window, and one is read. With CLOCK "app" the window is this
        # host's, known exactly, and so is the time left in it.
        period = self.rate.period_ms
        app_now = node.now_ms() if node.app_clock else None
        if app_now is not None:
            windows = range(app_now // period, app_now // period + 1)
        else:
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
                if app_now is not None:
                    if value is not None:
                        count, ttl_ms = int(value), (app_now // period + 1) * period - app_now
                elif value is not None and 0 <= ttl <= period and not count:
                    count, ttl_ms = int(value), ttl
            if count < limit:
                outcome = new_tuple(Outcome, (True, limit - count, 0, ttl_ms))
            else:
                outcome = new_tuple(Outcome, (False, 0, max(ttl_ms, 1), ttl_ms))
            over = f"{count - limit:,} over the limit (denied hits count too)"
            return Reading(outcome, count, over if count > limit else "")

        return read

    def script_entry(self, node: RedisNode, key: str) -> tuple[list[str], tuple[int | str, ...]]:
        """Return the counters of the windows the server may be in, and the parameters.

        ``fixed_window.lua`` reads the server's time and picks the counter of
        its window: one key, or two when the clock's bounds straddle an edge.
        With ``CLOCK: "app"`` the window of this host's clock (the script is
        given the time, read again: at an edge between the two reads it
        answers -1 and is asked again).
        """
        first, last = self.windows(node)
        return [f"{key}:{w}" for w in range(first, last + 1)], self.script_parameters(first)

    def windows(self, node: RedisNode) -> tuple[int, int]:
        """Return the first and last window the decision's clock may be in now (the
        same one, or two neighbours when the clock's bounds straddle an edge)."""
        period = self.rate.period_ms
        if node.app_clock:
            low = high = node.now_ms()
        else:
            low, high = node.now_range_ms()
        first = low // period
        return first, min(high // period, first + 1)

    def script_parameters(self, window: int) -> tuple[int, int, int]:
        """``fixed_window.lua``'s parameters, ``window`` its first key's: period, limit, window."""
        return self.rate.period_ms, self.rate.limit, window

    def script_outcome(
        self, node: RedisNode, reply: Sequence[int], sent: float, received: float
    ) -> Outcome | None:
        allowed, remaining, retry_ms, reset_ms, _, server_ms = reply[:6]
        if not node.app_clock:
            node.clock.observe(server_ms, sent, received)
        if allowed < 0:
            return None
        return new_tuple(Outcome, (bool(allowed), remaining, retry_ms, reset_ms))

    def keys(self, node: RedisNode, key: str) -> list[str]:
        # The neighbours too: the local clock estimate may sit a hair on the
        # other side of an edge from where an earlier hit counted.
        window = self._window(node)
        return [f"{key}:{w}" for w in (window - 1, window, window + 1)]
