"""Concurrency: at most ``limit`` requests of one identity in flight at once.

Stripe's concurrent-request limiter. A hit that is allowed takes ``cost``
slots; the caller gives them back when the request is done
(``django_rl.leases``: the front doors do it when the request is done,
``http/slots.py``: its response closed, streaming included, or the one a
middleware sent instead, an ASGI client gone, an exception). A slot nobody gives back (the
process died, or lost Redis when it tried) ends by itself ``timeout``
seconds after it was taken, by the Redis server's clock.

State: a ZSET per identity, ``concurrency.lua``: one member per slot, named
by the hit's token (random, made here), scored by when its lease ends. The
key lives until the latest lease ends. A denied hit takes nothing and is
told to retry when enough leases would end by their timeout, at most
:data:`RETRY_AFTER_MS` (1 s): a slot may come back at any moment, so a
denial is never remembered by the deny cache.

``timeout`` must be longer than the slowest request (streaming included):
a lease that ends while its request still runs lets another request in.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from redis.exceptions import RedisError

from django_rl.algorithms.base import (
    Outcome,
    ParameterError,
    Reading,
    ScriptAlgorithm,
    algorithm_script,
)
from django_rl.backends import LuaScript
from django_rl.backends.aio_node import aeval, apipeline
from django_rl.core.reprs import short_repr

if TYPE_CHECKING:
    from django_rl.backends import RedisNode

SCRIPT = algorithm_script("concurrency")

#: The most slots one identity may have in flight: a hit of cost c adds c
#: members, and the slots are requests running at once, never thousands.
MAX_LIMIT = 10_000
#: The longest ``timeout``, in seconds (a day).
MAX_TIMEOUT = 86_400
#: The longest Retry-After a denied hit is told, in ms: a slot can come back
#: at any moment, so clients are asked to try again soon.
RETRY_AFTER_MS = 1_000


def members(token: str, cost: int) -> list[str]:
    """Return the ZSET members of a hit's slots, as ``concurrency.lua`` names them."""
    if cost == 1:
        return [token]
    return [f"{token}:{i}" for i in range(1, cost + 1)]


#: The give-backs of cancelled takes under way (a task is kept until it ends).
_giving_back: set[asyncio.Task[None]] = set()
#: Tries of a cancelled take's give-back, and the wait between them (seconds):
#: the take may reach the server after the first try (a paused server, a slow write).
GIVE_BACK_TRIES, GIVE_BACK_WAIT = 5, 0.05


def give_back_cancelled(node: RedisNode, key: str, names: list[str]) -> None:
    """Give back the slots a cancelled take may have taken, in a task of its own."""
    task = asyncio.get_running_loop().create_task(_give_back(node, key, names))
    _giving_back.add(task)
    task.add_done_callback(_giving_back.discard)


async def _give_back(node: RedisNode, key: str, names: list[str]) -> None:
    for _ in range(GIVE_BACK_TRIES):
        try:
            _, (removed,) = await apipeline(node, lambda pipe: pipe.zrem(key, *names))
        except RedisError:
            return  # the slots end at the policy's timeout
        if removed:
            return
        await asyncio.sleep(GIVE_BACK_WAIT)


def new_token() -> str:
    """Return a fresh lease token: 64 random bits, as hex."""
    return os.urandom(8).hex()


class Held(Outcome):
    """The Outcome of a hit that took slots: ``token`` names its lease.

    Still a 4-tuple (it unpacks as an Outcome does); the token is an attribute.
    """

    token: str


def _held(outcome: Outcome, token: str) -> Held:
    held = Held(*outcome)
    held.token = token
    return held


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Concurrency(ScriptAlgorithm):
    name: ClassVar[str] = "concurrency"
    parameters: ClassVar[frozenset[str]] = frozenset({"limit", "timeout"})
    # A slot can come back at any moment: a denial says nothing about later hits.
    denial_holds_for_any_cost: ClassVar[bool] = False
    #: Read by ``Policy.answered``: the deny cache must never answer for it.
    cache_denials: ClassVar[bool] = False
    script: ClassVar[LuaScript] = SCRIPT

    def __init__(self, limit: object, timeout: object) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise ParameterError(
                f"limit must be a whole number of requests in flight at once, not "
                f"{short_repr(limit)}"
            )
        if not 1 <= limit <= MAX_LIMIT:
            raise ParameterError(
                f"limit must be between 1 and {MAX_LIMIT:,} requests in flight at once, "
                f"not {short_repr(limit)}"
            )
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not math.isfinite(timeout)
        ):
            raise ParameterError(
                f"timeout must be a number of seconds (e.g. 30), not {short_repr(timeout)}"
            )
        if not 0.001 <= timeout <= MAX_TIMEOUT:
            raise ParameterError(
                f"timeout must be between 0.001 and {MAX_TIMEOUT:,} seconds, "
                f"not {short_repr(timeout)}"
            )
        self._limit = limit
        self.timeout = timeout
        self.timeout_ms = max(1, round(timeout * 1000))

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> Concurrency:
        # The registry passes "rate" to every algorithm; a rate (an override's)
        # means nothing here.
        if spec.get("rate") is not None:
            raise ParameterError(
                f"concurrency takes no rate (given {short_repr(spec['rate'])}): "
                "it limits requests in flight, with limit and timeout"
            )
        return cls(spec["limit"], spec["timeout"])

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def description(self) -> str:
        return f"{self.name} {self._limit} timeout {self.timeout:g}s"

    def script_args(self, cost: int, commit: str, token: str = "") -> tuple[int | str, ...]:
        return (self._limit, self.timeout_ms, token, RETRY_AFTER_MS, cost, commit)

    def _hit_args(self, node: RedisNode, cost: int) -> tuple[int | str, ...]:
        return (*self.script_args(cost, "1", new_token()), node.script_time())

    def hit(self, node: RedisNode, key: str, cost: int) -> Outcome:
        return self.outcome(self.script(node.client, (key,), self._hit_args(node, cost)))

    async def ahit(self, node: RedisNode, key: str, cost: int) -> Outcome:
        """:meth:`hit`, awaited (the same script and arguments).

        Cancelled while the take is in flight (the client left), it may still
        reach Redis: its slots are given back by a task of their own
        (:func:`give_back_cancelled`), so none is held past the cancellation.
        """
        args = self._hit_args(node, cost)
        try:
            reply = await aeval(node, self.script, (key,), args)
        except asyncio.CancelledError:
            give_back_cancelled(node, key, members(str(args[2]), cost))
            raise
        return self.outcome(reply)

    def script_entry(self, node: RedisNode, key: str) -> tuple[list[str], tuple[int | str, ...]]:
        # A token per hit: it comes back in the reply when the hit takes slots.
        return [key], self.script_args(1, "0", new_token())[:-2]

    def outcome(self, reply: Sequence[Any]) -> Outcome:
        allowed, remaining, retry_ms, reset_ms = (int(x) for x in reply[:4])
        made = Outcome(bool(allowed), remaining, retry_ms, reset_ms)
        token = _text(reply[5]) if len(reply) > 5 else ""
        return _held(made, token) if token else made

    def reading(self, reply: Sequence[Any]) -> Reading:
        used = int(reply[4])
        detail = f"{used:,} of {self._limit:,} in flight"
        return Reading(self.outcome(reply), used, detail)
