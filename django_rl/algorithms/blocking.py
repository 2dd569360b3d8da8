"""Blocks and escalation: an algorithm with a block in front of it (``block_for``, ``escalate``).

A policy with ``block_for`` or ``escalate`` decides by :class:`Blocking`, its
algorithm wrapped: one script (``blocks.lua`` around the algorithm's own
Lua function, the one ``together.lua`` runs) reads the identity's block
hash (``<key>:b``, in the identity's hash slot, with a TTL) and the
algorithm's state in the decision's one round trip. A blocked hit is
denied without being counted; a counted denial starts a ``block_for`` block
and counts for ``escalate``. The keys' fingerprint is the algorithm's own:
adding or changing the blocks keeps the state.

Without them a policy decides by its algorithm alone, unchanged (the fixed
window's MULTI/EXEC included).
"""

from __future__ import annotations

import time
from collections.abc import Coroutine, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django_rl.algorithms.base import PRELUDE, Outcome, Reading, ReadReplies, new_tuple
from django_rl.backends.aio_node import acall, aeval
from django_rl.backends.clock import ClockError
from django_rl.backends.scripts import EncodedScript, LuaScript

if TYPE_CHECKING:
    from redis.client import Pipeline

    from django_rl.algorithms.base import Algorithm
    from django_rl.algorithms.fixed_window import FixedWindow
    from django_rl.backends.node import RedisNode

#: The algorithms whose Lua functions the scripts with blocks hold.
FRAGMENTS = ("fixed_window", "sliding_log", "token_bucket", "gcra", "sliding_window")
#: The algorithms a policy's blocks and points apply to (not ``concurrency``).
BLOCKABLE = frozenset(FRAGMENTS)
#: What a block hash's key adds to the identity's key.
BLOCK_SUFFIX = ":b"
#: Attempts at the fixed window's current window (as ``fixed_window.MAX_ATTEMPTS``).
MAX_ATTEMPTS = 4


#: One hit of the algorithm ``{name}`` with blocks: ARGV = the algorithm's parameters
#: (read as its ``args``, which ignores what follows), blocks.lua's four bargs, the
#: number of the algorithm's keys, cost, '1' to count ('0': look), the time. KEYS:
#: the algorithm's, then the block hash.
_ALONE = """
local n = #ARGV
local nkeys = tonumber(ARGV[n - 3])
local keys = KEYS
if nkeys ~= 1 then keys = {{unpack(KEYS, 1, nkeys)}} end
return blocks_decide({name}, keys, KEYS[nkeys + 1], clock(ARGV[n]), tonumber(ARGV[n - 2]),
  ARGV[n - 1] == '1', ARGV, ARGV, n - 7)
"""
#: Each algorithm's script with blocks (its own Lua function only: a short script).
HIT_SCRIPTS = {
    name: LuaScript.from_parts(
        "django_rl.algorithms",
        (PRELUDE, f"{name}.lua", "blocks.lua"),
        _ALONE.format(name=name),
        name=f"blocks.lua ({name})",
    )
    for name in FRAGMENTS
}
#: The ms left in a block (0: none): KEYS[1] the block hash, ARGV[1] the time.
LEFT_SCRIPT = LuaScript.from_parts(
    "django_rl.algorithms",
    (PRELUDE,),
    """
local ends = tonumber(redis.call('HGET', KEYS[1], 'b') or '0')
local now = clock(ARGV[1])
if ends > now then return ends - now end
return 0
""",
    name="block_left.lua",
)
#: penalize, reward, block, unblock (``policies/points.py``).
POINTS_SCRIPT = LuaScript.from_parts(
    "django_rl.algorithms",
    (PRELUDE, *(f"{name}.lua" for name in FRAGMENTS), "blocks.lua", "block_mark.lua", "points.lua"),
    "",
    name="points.lua",
)
#: The mark alone (where it lives on another node than the block: a Redis Cluster).
#: KEYS[1] the mark; ARGV: the policy's name, the block's ms, the slack's ms, the time.
MARK_SCRIPT = LuaScript.from_parts(
    "django_rl.algorithms",
    (PRELUDE, "block_mark.lua"),
    "mark_block(KEYS[1], ARGV[1], clock(ARGV[4]), tonumber(ARGV[2]), tonumber(ARGV[3]))",
    name="block_mark.lua",
)


@dataclass(frozen=True)
class Blocks:
    """A policy's ``block_for`` and ``escalate``, in ms (0: not set)."""

    block_ms: int = 0
    after: int = 0
    within_ms: int = 0
    escalate_ms: int = 0

    @property
    def arguments(self) -> tuple[int, int, int, int]:
        """blocks.lua's ``bargs``."""
        return (self.block_ms, self.after, self.within_ms, self.escalate_ms)

    @property
    def escalates(self) -> bool:
        return self.after > 0


class BlockOutcome(Outcome):
    """The Outcome of a hit denied by a block, or of a denial that started one.

    Still a 4-tuple; ``started_ms`` is the length of the block this hit
    started (0: none; it was blocked before); ``operator``: blocked by
    ``block()``, which a shadow policy enforces too.
    """

    started_ms: int
    operator: bool


class Uncounted(Outcome):
    """A denial the deny cache must not answer for (with ``escalate``: every denial counts)."""


def script_name(algorithm: Any) -> str:
    """Return the name ``together.lua`` and ``refund.lua`` know ``algorithm`` by."""
    name: str = getattr(algorithm, "script_name", None) or algorithm.name
    return name


def block_key(key: str) -> str:
    """Return the block hash of the identity whose state is at ``key``."""
    return key + BLOCK_SUFFIX


#: Steps of a script call: yields (KEYS, (ARGV's head, its segment)), is sent the reply.
Steps = Generator[tuple[list[str], tuple[tuple[Any, ...], tuple[Any, ...]]], Any, Any]


class Blocking:
    """``inner`` with blocks: every other attribute is the algorithm's own."""

    def __init__(self, inner: Algorithm, blocks: Blocks) -> None:
        self.inner = inner
        self.blocks = blocks
        self.script_name = "+" + inner.name
        self._arguments = blocks.arguments
        self._script = HIT_SCRIPTS[inner.name]
        #: The script algorithm's reading of its reply (the fixed window's: None).
        self._outcome: Any = getattr(inner, "outcome", None)
        #: An algorithm whose keys and parameters never change (one key: all but the
        #: fixed window): its EVALSHA encoded once but for the key, cost, commit, time.
        self._encoded: EncodedScript | None = None
        if inner.name != "fixed_window":
            parameters = inner.script_entry(None, "")[1]  # type: ignore[arg-type]  # (no node)
            fixed = (*parameters, *self._arguments, 1)
            self._encoded = EncodedScript(self._script, fixed, 3, ("", BLOCK_SUFFIX))
        #: The fixed window's EVALSHA for the current window, and its number.
        self._by_window: tuple[int, EncodedScript] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"Blocking({self.inner!r}, {self.blocks!r})"

    def steps(self, node: RedisNode, key: str, cost: int, commit: str) -> Steps:
        """A hit's (or look's) steps: the script, again when a fixed window's estimate missed.

        Yields ``(KEYS, (head, tail))``: ARGV's head, whose encoding the script
        keeps (``LuaScript.run``'s segment), and its tail.
        """
        inner = self.inner
        for attempt in range(MAX_ATTEMPTS):
            keys, parameters = inner.script_entry(node, key)
            segment = (*parameters, *self._arguments, len(keys))
            sent = time.monotonic()
            reply = yield [*keys, key + BLOCK_SUFFIX], (segment, (cost, commit, node.script_time()))
            outcome = self.script_outcome(node, reply, sent, time.monotonic())
            if outcome is not None:
                return outcome
            if attempt and not node.app_clock:
                node.clock.resync()
        raise ClockError(
            f"no current window found on the Redis server's clock in {MAX_ATTEMPTS} attempts"
        )

    def hit(self, node: RedisNode, key: str, cost: int) -> Outcome:
        encoded = self._encoded
        if encoded is None:
            return self._fixed_window_hit(node, key, cost)
        return self._read(node, encoded(node.client, key, cost, "1", node.script_time()))

    def _read(self, node: RedisNode, reply: Sequence[int]) -> Outcome:
        """The Outcome of a script algorithm's hit (one key: never asked again)."""
        if not reply[2]:  # not blocked (the usual case)
            outcome = self._outcome(reply[3:])
            if not outcome[0] and self.blocks.after:
                return Uncounted(*outcome)
            return outcome  # type: ignore[no-any-return]
        return self.script_outcome(node, reply, 0.0, 0.0)  # type: ignore[return-value]  # one key

    def _fixed_window_hit(self, node: RedisNode, key: str, cost: int) -> Outcome:
        """The fixed window's hit: where the clock's bounds lie in one window (the
        usual case), its counter's EVALSHA encoded once per window; else, or when
        the server's window was another, the steps (:meth:`steps`)."""
        inner: FixedWindow = self.inner  # type: ignore[assignment]  # (encoded only: the fixed window)
        window, last = inner.windows(node)
        if window == last:
            by_window = self._by_window
            if by_window is None or by_window[0] != window:
                # A new window: its counter's key and number in the fixed part
                # (the script checks the number against the server's clock).
                fixed = (*inner.script_parameters(window), *self._arguments, 1)
                suffixes = (f":{window}", BLOCK_SUFFIX)
                by_window = self._by_window = (
                    window,
                    EncodedScript(self._script, fixed, 3, suffixes),
                )
            sent = time.monotonic()
            reply = by_window[1](node.client, key, cost, "1", node.script_time())
            found = self.script_outcome(node, reply, sent, time.monotonic())
            if found is not None:
                return found
        return drive(node, self.steps(node, key, cost, "1"), self._script)  # type: ignore[no-any-return]

    def ahit(self, node: RedisNode, key: str, cost: int) -> Coroutine[Any, Any, Outcome]:
        """:meth:`hit`, awaited: the same EVALSHA, encoded once but for the key, cost,
        commit and time (the fixed window: its steps, a window's estimate may miss).

        (The coroutine that decides, not one of its own around it: a level
        fewer to enter and to resume on every decision.)
        """
        encoded = self._encoded
        if encoded is None:
            return adrive(node, self.steps(node, key, cost, "1"), self._script)
        variable = (cost, "1", node.script_time())
        return acall(node, encoded, key, variable, lambda reply: self._read(node, reply))

    def peek(self, node: RedisNode, key: str) -> Outcome:
        read, replies = node.pipeline(lambda pipe: self.queue_peek(pipe, node, key))
        return read(iter(replies)).outcome

    def queue_peek(self, pipe: Pipeline, node: RedisNode, key: str) -> ReadReplies:
        read_inner = self.inner.queue_peek(pipe, node, key)
        LEFT_SCRIPT.queue(pipe, (key + BLOCK_SUFFIX,), (node.script_time(),))

        def read(replies: Iterator[Any]) -> Reading:
            reading = read_inner(replies)
            left = int(next(replies))
            if not left:
                return reading
            outcome = reading.outcome
            blocked = new_tuple(
                Outcome,
                (False, 0, max(left, outcome[2]), max(left, outcome[3])),
            )
            detail = f"{reading.detail}; blocked".lstrip("; ")
            return Reading(blocked, reading.used, detail, left / 1000)

        return read

    def keys(self, node: RedisNode, key: str) -> list[str]:
        return [*self.inner.keys(node, key), key + BLOCK_SUFFIX]

    def script_entry(self, node: RedisNode, key: str) -> tuple[list[str], tuple[int | str, ...]]:
        keys, parameters = self.inner.script_entry(node, key)
        return [*keys, key + BLOCK_SUFFIX], (*self._arguments, *parameters)

    def script_outcome(
        self, node: RedisNode, reply: Sequence[int], sent: float, received: float
    ) -> Outcome | None:
        """blocks.lua's reply: {blocked, ms started, ms left, the algorithm's reply}."""
        outcome = self.inner.script_outcome(node, reply[3:], sent, received)
        if outcome is None:
            return None
        left = reply[2]
        if left:
            blocked = BlockOutcome(False, 0, max(left, outcome[2]), max(left, outcome[3]))
            blocked.started_ms = reply[1]
            blocked.operator = reply[0] == 2
            return blocked
        if not outcome[0] and self.blocks.after:
            return Uncounted(*outcome)
        return outcome


def drive(node: RedisNode, steps: Steps, script: LuaScript) -> Any:
    """Run ``steps`` with ``script``, each step one EVALSHA (``LuaScript.run``: the head's
    encoding kept as a segment, then the tail)."""
    try:
        keys, (head, tail) = next(steps)
        while True:
            reply = script.run(node.client, keys, (), (head, tail))
            keys, (head, tail) = steps.send(reply)
    except StopIteration as done:
        return done.value


async def adrive(node: RedisNode, steps: Steps, script: LuaScript) -> Any:
    """:func:`drive`, awaited."""
    try:
        keys, (head, tail) = next(steps)
        while True:
            reply = await aeval(node, script, keys, (*head, *tail))
            keys, (head, tail) = steps.send(reply)
    except StopIteration as done:
        return done.value
