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
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django_rl.algorithms.base import PRELUDE, Outcome, Reading, ReadReplies, new_tuple
from django_rl.backends.aio_node import aeval
from django_rl.backends.clock import ClockError
from django_rl.backends.scripts import LuaScript

if TYPE_CHECKING:
    from redis.client import Pipeline

    from django_rl.algorithms.base import Algorithm
    from django_rl.backends.node import RedisNode

#: The algorithms whose Lua functions the scripts with blocks hold.
FRAGMENTS = ("fixed_window", "sliding_log", "token_bucket", "gcra", "sliding_window")
#: The algorithms a policy's blocks and points apply to (not ``concurrency``).
BLOCKABLE = frozenset(FRAGMENTS)
#: What a block hash's key adds to the identity's key.
BLOCK_SUFFIX = ":b"
#: Attempts at the fixed window's current window (as ``fixed_window.MAX_ATTEMPTS``).
MAX_ATTEMPTS = 4

_PARTS = (PRELUDE, *(f"{name}.lua" for name in FRAGMENTS), "blocks.lua")

#: One hit: ARGV = name, the number of the algorithm's keys, blocks.lua's four
#: bargs, the algorithm's parameters, cost, '1' to count ('0': look), time.
HIT_SCRIPT = LuaScript.from_parts(
    "django_rl.algorithms",
    _PARTS,
    """
local n = #ARGV
local nkeys = tonumber(ARGV[2])
return blocks_decide(block_algorithms[ARGV[1]], {unpack(KEYS, 1, nkeys)}, KEYS[nkeys + 1],
  clock(ARGV[n]), tonumber(ARGV[n - 2]), ARGV[n - 1] == '1', {unpack(ARGV, 7, n - 3)},
  {ARGV[3], ARGV[4], ARGV[5], ARGV[6]})
""",
    name="blocks.lua",
)
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
    "django_rl.algorithms", (*_PARTS, "points.lua"), "", name="points.lua"
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
    started (0: none; it was blocked before).
    """

    started_ms: int


class Uncounted(Outcome):
    """A denial the deny cache must not answer for (with ``escalate``: every denial counts)."""


def script_name(algorithm: Any) -> str:
    """Return the name ``together.lua`` and ``refund.lua`` know ``algorithm`` by."""
    name: str = getattr(algorithm, "script_name", None) or algorithm.name
    return name


def block_key(key: str) -> str:
    """Return the block hash of the identity whose state is at ``key``."""
    return key + BLOCK_SUFFIX


#: Steps of a script call: yields (KEYS, ARGV), is sent the reply.
Steps = Generator[tuple[list[str], tuple[int | str, ...]], Any, Any]


class Blocking:
    """``inner`` with blocks: every other attribute is the algorithm's own."""

    def __init__(self, inner: Algorithm, blocks: Blocks) -> None:
        self.inner = inner
        self.blocks = blocks
        self.script_name = "+" + inner.name
        self._arguments = blocks.arguments

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"Blocking({self.inner!r}, {self.blocks!r})"

    def steps(self, node: RedisNode, key: str, cost: int, commit: str) -> Steps:
        """A hit's (or look's) steps: the script, again when a fixed window's estimate missed."""
        inner = self.inner
        for attempt in range(MAX_ATTEMPTS):
            keys, parameters = inner.script_entry(node, key)
            argv = (
                inner.name, len(keys), *self._arguments, *parameters, cost, commit,
                node.script_time(),
            )  # fmt: skip
            sent = time.monotonic()
            reply = yield [*keys, key + BLOCK_SUFFIX], argv
            outcome = self.script_outcome(node, reply, sent, time.monotonic())
            if outcome is not None:
                return outcome
            if attempt and not node.app_clock:
                node.clock.resync()
        raise ClockError(
            f"no current window found on the Redis server's clock in {MAX_ATTEMPTS} attempts"
        )

    def hit(self, node: RedisNode, key: str, cost: int) -> Outcome:
        return drive(node, self.steps(node, key, cost, "1"), HIT_SCRIPT)  # type: ignore[no-any-return]

    async def ahit(self, node: RedisNode, key: str, cost: int) -> Outcome:
        return await adrive(node, self.steps(node, key, cost, "1"), HIT_SCRIPT)  # type: ignore[no-any-return]

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
            return blocked
        if not outcome[0] and self.blocks.after:
            return Uncounted(*outcome)
        return outcome


def drive(node: RedisNode, steps: Steps, script: LuaScript) -> Any:
    """Run ``steps`` with ``script``, each step one EVALSHA."""
    try:
        keys, argv = next(steps)
        while True:
            keys, argv = steps.send(script(node.client, keys, argv))
    except StopIteration as done:
        return done.value


async def adrive(node: RedisNode, steps: Steps, script: LuaScript) -> Any:
    """:func:`drive`, awaited."""
    try:
        keys, argv = next(steps)
        while True:
            keys, argv = steps.send(await aeval(node, script, keys, argv))
    except StopIteration as done:
        return done.value
