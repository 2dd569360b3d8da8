"""What every algorithm provides."""

from __future__ import annotations

import functools
from collections.abc import Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

# (Defined in outcomes.py, which static.py imports too; the algorithms and the
# policies import them from here.)
from django_rl.algorithms.outcomes import Outcome as Outcome
from django_rl.algorithms.outcomes import Reading as Reading
from django_rl.algorithms.outcomes import ReadReplies as ReadReplies
from django_rl.algorithms.outcomes import new_tuple as new_tuple
from django_rl.algorithms.static import rate_or_static
from django_rl.backends.aio_node import acall, apipeline
from django_rl.backends.scripts import EncodedScript, LuaScript
from django_rl.core.rates import Rate

if TYPE_CHECKING:
    from redis.client import Pipeline

    from django_rl.algorithms.static import StaticAlgorithm
    from django_rl.backends.node import RedisNode

R = TypeVar("R", bound="RateAlgorithm")
B = TypeVar("B", bound="BucketAlgorithm")


#: The files every script starts with (``prelude.lua`` says what an
#: algorithm's Lua function takes and returns).
PRELUDE = "prelude.lua"

#: Runs one algorithm alone: its ARGV are its parameters, then the cost,
#: ``"1"`` to count (``"0"`` to look) and the time (see ``ScriptAlgorithm``).
_ALONE = """
local n = #ARGV
return {name}(KEYS, clock(ARGV[n]), tonumber(ARGV[n - 2]), ARGV[n - 1] == '1', ARGV)
"""


def algorithm_script(name: str) -> LuaScript:
    """Return the script that runs the algorithm of ``<name>.lua`` alone on its keys."""
    return LuaScript.from_parts(
        __package__ or "django_rl.algorithms", (PRELUDE, f"{name}.lua"), _ALONE.format(name=name),
        name=f"{name}.lua",
    )  # fmt: skip


class ParameterError(ValueError):
    """An algorithm parameter (other than the rate) has a bad value."""


class Algorithm(Protocol):
    """A rate-limiting algorithm bound to its parameters.

    Every method makes exactly one round trip to Redis (``fixed_window``
    adds one ``TIME`` every 30 s per process and server, see ``ServerClock``)
    and takes time from the Redis server, never from this host. It is given
    the :class:`RedisNode` that owns ``key`` (the one server, or the cluster
    primary of the key's slot), so it works the same on every topology.
    """

    #: The name a policy's ``algorithm`` uses.
    name: ClassVar[str]
    #: The policy keys this algorithm requires (besides ``algorithm`` and ``key``).
    parameters: ClassVar[frozenset[str]]
    #: Whether a denied hit, of any cost, means every hit of any cost is denied
    #: with ``remaining == 0`` until its Retry-After (the deny cache relies on it).
    denial_holds_for_any_cost: ClassVar[bool]
    #: The layout of the stored state, from 1. A new layout is part of the
    #: keys' fingerprint (see :func:`fingerprint_text`), so state written in an
    #: older layout is never misread: it is left to expire by its TTL.
    state_version: ClassVar[int]

    @property
    def limit(self) -> int:
        """Return the most hits of cost 1 that can be allowed at once."""
        ...

    @property
    def description(self) -> str:
        """Return the algorithm and its parameters, e.g. ``fixed_window 5/m``.

        A key's fingerprint is derived from it (and from ``state_version``),
        so it must change whenever the meaning of the stored state would.
        """
        ...

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> Algorithm:
        """Build from a policy's settings; raise RateError or ParameterError."""
        ...

    def hit(self, node: RedisNode, key: str, cost: int) -> Outcome:
        """Count a hit of weight ``cost`` (1 <= cost <= limit) and decide."""
        ...

    async def ahit(self, node: RedisNode, key: str, cost: int) -> Outcome:
        """:meth:`hit` awaited on the event loop (``backends/aio_node.py``): the same commands."""
        ...

    def peek(self, node: RedisNode, key: str) -> Outcome:
        """Decide whether a hit of cost 1 would be allowed, changing nothing."""
        ...

    def queue_peek(self, pipe: Pipeline, node: RedisNode, key: str) -> ReadReplies:
        """Queue on ``pipe`` the commands of ``peek`` (reads only); return their reader.

        The state of many identities can then be read in one round trip (the
        admin page). ``peek`` is this with a pipeline of its own.
        """
        ...

    def keys(self, node: RedisNode, key: str) -> list[str]:
        """Return the Redis keys that may hold this identity's state now."""
        ...

    def script_entry(self, node: RedisNode, key: str) -> tuple[list[str], tuple[int | str, ...]]:
        """Return the keys and parameters of this algorithm's Lua function (``prelude.lua``).

        For a script that decides several policies together (``together.lua``).
        """
        ...

    def script_outcome(
        self, node: RedisNode, reply: Sequence[int], sent: float, received: float
    ) -> Outcome | None:
        """Turn this algorithm's reply within such a script into an Outcome.

        ``None`` when the reply says the hit could not be decided with the
        keys given (``fixed_window``: the server's window was not among them):
        then ask again. ``sent`` and ``received`` are the local monotonic
        times around the round trip, for what the reply tells of the clock.
        """
        ...


def fingerprint_text(algorithm: Algorithm) -> str:
    """Return what a policy's key fingerprint is made from.

    The description alone for the first layout of the state (the keys it
    always had), then the description and `` v<state_version>``.
    """
    if algorithm.state_version == 1:
        return algorithm.description
    return f"{algorithm.description} v{algorithm.state_version}"


def read_now(algorithm: Algorithm, node: RedisNode, key: str) -> Reading:
    """Run ``algorithm.queue_peek`` in a pipeline of its own: one round trip."""
    read, replies = node.pipeline(lambda pipe: algorithm.queue_peek(pipe, node, key))
    return read(iter(replies))


async def aread_now(algorithm: Algorithm, node: RedisNode, key: str) -> Reading:
    """:func:`read_now`, awaited: the same commands (``queue_peek``) in one round trip."""
    read, replies = await apipeline(node, lambda pipe: algorithm.queue_peek(pipe, node, key))
    return read(iter(replies))


async def apeek(node: RedisNode, key: str, algorithm: Algorithm) -> Outcome:
    """``algorithm.peek(node, key)``, awaited (every algorithm's peek is its ``queue_peek``
    read); arguments in the order of a backend's operation (``aio_node.arun``)."""
    return (await aread_now(algorithm, node, key)).outcome


class RateAlgorithm:
    """The shared half of the algorithms whose one parameter is ``rate``."""

    name: ClassVar[str]
    parameters: ClassVar[frozenset[str]] = frozenset({"rate"})
    state_version: ClassVar[int] = 1

    def __init__(self, rate: Rate) -> None:
        self.rate = rate

    @classmethod
    def from_spec(cls: type[R], spec: Mapping[str, Any]) -> R | StaticAlgorithm:
        """Build at ``spec["rate"]``; ``None`` and ``"0/<period>"`` make a static algorithm."""
        rate = rate_or_static(spec["rate"])
        return cls(rate) if isinstance(rate, Rate) else rate

    @property
    def limit(self) -> int:
        return self.rate.limit

    @property
    def description(self) -> str:
        return f"{self.name} {self.rate}"


def whole_count(name: str, value: object) -> int:
    """Return ``value`` if it is a whole number from 1 to ``MAX_COUNT``, else raise.

    :raises ParameterError: naming the parameter (``capacity``, ``burst``).
    """
    from django_rl.core.rates import MAX_COUNT
    from django_rl.core.reprs import short_repr

    if isinstance(value, bool) or not isinstance(value, int):
        raise ParameterError(f"{name} must be a whole number, not {short_repr(value)}")
    if not 1 <= value <= MAX_COUNT:
        raise ParameterError(f"{name} must be between 1 and {MAX_COUNT:,}, not {short_repr(value)}")
    return value


class BucketAlgorithm:
    """The shared half of the algorithms of a rate and a size (``token_bucket``, ``gcra``).

    ``size_parameter`` names the size's policy key; the class is built as
    ``cls(size, rate)``. A static rate (``None``, ``"0/<period>"``) makes a
    static algorithm, the size still judged.
    """

    size_parameter: ClassVar[str]

    def __init__(self, size: int, rate: Rate) -> None:
        raise NotImplementedError("__init__")

    @classmethod
    def from_spec(cls: type[B], spec: Mapping[str, Any]) -> B | StaticAlgorithm:
        rate = rate_or_static(spec["rate"])
        if isinstance(rate, Rate):
            return cls(spec[cls.size_parameter], rate)
        cls(spec[cls.size_parameter], Rate(1, 1_000))  # the size must still be valid
        return rate


class ScriptAlgorithm:
    """The shared half of the algorithms that are one Lua script on one key.

    The script takes the algorithm's arguments, then the cost and ``"1"`` to
    count (``"0"`` to only look: ``peek``), then the time (``""``: the script
    reads the server's ``TIME``; else this host's time in ms, with ``CLOCK:
    "app"``, see :meth:`RedisNode.script_time`), and replies with four
    integers that :meth:`outcome` reads (and any more that :meth:`reading`
    reads). Its keys are all passed as ``KEYS`` (a Redis Cluster routes by
    them, and ACL rules check them), and it never calls
    ``redis.replicate_commands()``: Redis 6.2 and later replicate a script's
    effects, never the script.
    """

    script: ClassVar[LuaScript]
    state_version: ClassVar[int] = 1

    def script_args(self, cost: int, commit: str) -> tuple[int | str, ...]:
        """Return the script's ARGV for a hit of ``cost`` (``commit`` ``"1"``) or a look."""
        raise NotImplementedError("script_args")

    def outcome(self, reply: Sequence[int]) -> Outcome:
        """Turn the script's reply into an Outcome."""
        raise NotImplementedError("outcome")

    def reading(self, reply: Sequence[int]) -> Reading:
        """Turn the reply of a look into what the admin page shows."""
        raise NotImplementedError("reading")

    @functools.cached_property
    def _encoded(self) -> EncodedScript:
        # The script's ARGV but for the cost, "1" and the time are fixed.
        return EncodedScript(self.script, self.script_args(1, "1")[:-2], 3)

    def hit(self, node: RedisNode, key: str, cost: int) -> Outcome:
        return self.outcome(self._encoded(node.client, key, cost, "1", node.script_time()))

    def ahit(self, node: RedisNode, key: str, cost: int) -> Coroutine[Any, Any, Outcome]:
        """:meth:`hit`, awaited: the same EVALSHA (the same ARGV), the same reading of it.

        (``acall``'s coroutine, which reads the reply, not one of its own: a
        level fewer to enter and to resume on every decision.)
        """
        return acall(node, self._encoded, key, (cost, "1", node.script_time()), self.outcome)

    def peek(self, node: RedisNode, key: str) -> Outcome:
        read, replies = node.pipeline(lambda pipe: self.queue_peek(pipe, node, key))
        return read(iter(replies)).outcome

    def queue_peek(self, pipe: Pipeline, node: RedisNode, key: str) -> ReadReplies:
        self.script.queue(pipe, (key,), (*self.script_args(1, "0"), node.script_time()))
        return lambda replies: self.reading(next(replies))

    def keys(self, node: RedisNode, key: str) -> list[str]:
        return [key]

    @functools.cached_property
    def _entry_parameters(self) -> tuple[int | str, ...]:
        # The script's ARGV without the cost, commit and time: the same on every hit.
        return tuple(self.script_args(1, "0")[:-2])

    def script_entry(self, node: RedisNode, key: str) -> tuple[list[str], tuple[int | str, ...]]:
        return [key], self._entry_parameters

    def script_outcome(
        self, node: RedisNode, reply: Sequence[int], sent: float, received: float
    ) -> Outcome | None:
        return self.outcome(reply)
