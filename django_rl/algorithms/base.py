"""What every algorithm provides."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol

if TYPE_CHECKING:
    from django_rl.backends import RedisBackend


class ParameterError(ValueError):
    """An algorithm parameter (other than the rate) has a bad value."""


class Outcome(NamedTuple):
    """An algorithm's answer, before the policy turns it into a Decision."""

    allowed: bool
    remaining: int
    retry_after_ms: int
    reset_after_ms: int


class Algorithm(Protocol):
    """A rate-limiting algorithm bound to its parameters.

    Every method makes exactly one round trip to Redis (``fixed_window``
    adds one ``TIME`` every 30 s per process, see ``ServerClock``) and takes
    time from the Redis server, never from this host.
    """

    #: The name a policy's ``algorithm`` uses.
    name: ClassVar[str]
    #: The policy keys this algorithm requires (besides ``algorithm`` and ``key``).
    parameters: ClassVar[frozenset[str]]
    #: Whether a denied hit, of any cost, means every hit of any cost is denied
    #: with ``remaining == 0`` until its Retry-After (the deny cache relies on it).
    denial_holds_for_any_cost: ClassVar[bool]

    @property
    def limit(self) -> int:
        """Return the most hits of cost 1 that can be allowed at once."""
        ...

    @property
    def description(self) -> str:
        """Return the algorithm and its parameters, e.g. ``fixed_window 5/m``.

        A key's fingerprint is derived from it, so it must change whenever the
        meaning of the stored state would.
        """
        ...

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> Algorithm:
        """Build from a policy's settings; raise RateError or ParameterError."""
        ...

    def hit(self, backend: RedisBackend, key: str, cost: int) -> Outcome:
        """Count a hit of weight ``cost`` (1 <= cost <= limit) and decide."""
        ...

    def peek(self, backend: RedisBackend, key: str) -> Outcome:
        """Decide whether a hit of cost 1 would be allowed, changing nothing."""
        ...

    def keys(self, backend: RedisBackend, key: str) -> list[str]:
        """Return the Redis keys that may hold this identity's state now."""
        ...
