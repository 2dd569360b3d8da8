"""What a backend offers the algorithms, the policies and the admin, whatever Redis it is."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Concatenate, ParamSpec, Protocol, TypeVar

if TYPE_CHECKING:
    from django_rl.backends.health import Health
    from django_rl.backends.node import RedisNode

P = ParamSpec("P")
T = TypeVar("T")


class Backend(Protocol):
    """The Redis behind one ``CACHES`` alias: one server (maybe Sentinel-managed) or a cluster.

    Algorithms never see a backend: a policy asks it to :meth:`run` an
    algorithm's operation on the :class:`RedisNode` that owns the key, so an
    algorithm talks to one server, the same way on every topology.
    """

    alias: str
    #: Whether the alias itself answers (a cluster's topology could be read);
    #: each node has a Health of its own.
    health: Health

    def run(
        self,
        key: str,
        operation: Callable[Concatenate[RedisNode, str, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Return ``operation(node, key, *args, **kwargs)`` on the node that owns ``key``.

        Records on the node whether Redis answered (one log line per outage).

        :raises redis.exceptions.RedisError: if Redis cannot answer.
        """
        ...

    def slot_of(self, key: str) -> int:
        """Return the hash slot of ``key`` (0 on one server): keys of a slot can share a script."""
        ...

    def node_for(self, key: str) -> RedisNode:
        """Return the node that owns ``key`` (the only one, on a single server).

        :raises redis.exceptions.RedisError: if that cannot be known now (a
            cluster none of whose nodes answers).
        """
        ...

    def nodes(self) -> list[RedisNode]:
        """Return every node that holds keys (the primaries of a cluster), in a stable order.

        :raises redis.exceptions.RedisError: as :meth:`node_for`.
        """
        ...
