"""One primary of a Redis Cluster as decisions use it: redirects, ``ASKING``, a hung node.

A :class:`ClusterMember` is a :class:`RedisNode` on one primary's pool, with
what only a cluster needs:

* **redirects are answers**, not outages: ``MOVED`` (the slot has a new
  owner) asks for a new read of the topology; ``ASK`` (the key is on the
  node importing the slot) and ``TRYAGAIN`` (keys of one command split by a
  migration) change nothing, and the backend follows them;
* **ASKING**: while following an ``ASK`` (:meth:`ClusterMember.asking`),
  this thread's kept connection sends ``ASKING`` before each command; a
  pipeline (:meth:`RedisNode.pipeline`) follows ``ASK`` per command;
* **a hung node costs one socket timeout per** :data:`PROBE_INTERVAL`, not
  one per decision: after a timeout, until the node answers again, one
  decision at a time, at most every :data:`PROBE_INTERVAL`, waits for it;
  the others fail at once (``fail_open`` decides).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from redis.exceptions import AskError, ClusterDownError, MovedError, TryAgainError
from redis.exceptions import TimeoutError as RedisTimeoutError

from django_rl.backends.connections import Command, KeptConnectionClient
from django_rl.backends.errors import makes_connections_stale
from django_rl.backends.node import RedisNode
from django_rl.backends.scripts import replies_with_scripts

if TYPE_CHECKING:
    from redis import Redis

    from django_rl.backends.cluster import ClusterBackend

P = ParamSpec("P")
T = TypeVar("T")

#: Seconds between two calls that wait for a node that timed out.
PROBE_INTERVAL = 0.25


def is_redirect(exc: BaseException) -> bool:
    """Return whether ``exc`` is ``ASK`` or ``TRYAGAIN``: a slot on the move, to follow."""
    return isinstance(exc, (AskError, TryAgainError)) and not isinstance(exc, MovedError)


class ClusterMember(RedisNode):
    """A primary of the cluster; see the module's docstring."""

    def __init__(self, backend: ClusterBackend, address: str, pooled: Redis) -> None:
        super().__init__(backend.alias, address, pooled)
        self._backend = weakref.ref(backend)
        # A node that timed out and has not answered since (see run).
        self._hung = False
        self._probing = False
        self._next_probe = 0.0
        self._probe_lock = threading.Lock()

    def _take_client(self) -> KeptConnectionClient:
        client = super()._take_client()
        if getattr(self._local, "asking", False):
            # Taken inside an ASKING block (its first call, or after a
            # replacement): held as the block holds its client.
            self._hold_for_asking(client)
        return client

    def _hold_for_asking(self, client: KeptConnectionClient) -> None:
        """Take ``client``'s lock until the end of this thread's ASKING block; set ``asking``.

        Held throughout: another thread that shares the client (a full
        pool) must not send ``ASKING`` before its own commands.

        :raises PoolExhausted: as :meth:`KeptConnectionClient.wait_turn`.
        """
        if not client.single_connection_lock.acquire(False):
            client.wait_turn()
        client.asking = True
        self._local.held.append(client)

    @contextmanager
    def asking(self) -> Iterator[None]:
        """Send ``ASKING`` before every command of this thread while in the block.

        For one operation that follows an ``ASK`` to this node (the node
        importing the slot): its transaction, script, ``TIME`` or pipeline
        then reaches the slot's keys here. The thread's client (and any it
        takes in the block) is held for the block (:meth:`_hold_for_asking`).
        """
        local = self._local
        local.held = []
        try:
            client: KeptConnectionClient | None = getattr(local, "client", None)
            if client is not None:
                self._hold_for_asking(client)
            local.asking = True
            yield
        finally:
            local.asking = False
            for client in local.held:
                client.asking = False
                client.single_connection_lock.release()
            local.held = []

    def run_asking(
        self,
        key: str,
        operation: Callable[Concatenate[RedisNode, str, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Return :meth:`run`'s result, each command preceded by ``ASKING`` (following ``ASK``)."""
        with self.asking():
            return self.run(key, operation, *args, **kwargs)

    def run(
        self,
        key: str,
        operation: Callable[Concatenate[RedisNode, str, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        probe = False
        if self._hung:
            probe = self._claim_probe()
            if not probe:
                exc = RedisTimeoutError(
                    f"node {self.address} timed out and has not answered since; one call "
                    f"every {PROBE_INTERVAL:g} s waits for it"
                )
                self.health.failed(exc, self.health.epoch)
                raise exc
        try:
            result = super().run(key, operation, *args, **kwargs)
        finally:
            if probe:
                self._probing = False
        if self._hung:
            self._hung = False  # it answered
        return result

    def _claim_probe(self) -> bool:
        now = time.monotonic()
        with self._probe_lock:
            if self._probing or now < self._next_probe:
                return False
            self._probing = True
            self._next_probe = now + PROBE_INTERVAL
        return True

    def _replies(self, commands: Sequence[Command]) -> list[Any]:
        """Return the replies to ``commands``, each ``ASK`` followed to the node it names.

        Per command: while a slot migrates, some of an identity's keys may be
        on the source and others on the target. The source answers the keys
        it has; each command it answers ``ASK`` goes, after ``ASKING``, to
        the target, and its reply takes its place.
        """
        replies = super()._replies(commands)
        asked = [i for i, reply in enumerate(replies) if is_redirect(reply)]
        backend = self._backend()
        if not asked or backend is None:
            return replies
        targets: dict[ClusterMember, list[int]] = {}
        for i in asked:
            reply = replies[i]
            if isinstance(reply, AskError):
                targets.setdefault(backend.member_at(reply.host, reply.port), []).append(i)
        for target, indices in targets.items():
            with target.asking():
                answers = replies_with_scripts(target.client, [commands[i] for i in indices])
            for i, answer in zip(indices, answers, strict=True):
                replies[i] = answer
        return replies

    def record_failure(self, exc: Exception, epoch: int | None = None) -> None:
        if is_redirect(exc):
            return  # an answer about a slot on the move: the backend follows it
        backend = self._backend()
        if isinstance(exc, MovedError):
            # An answer too: the slot has a new owner. Nothing about this node.
            if backend is not None:
                backend.refresh_soon()
            return
        if isinstance(exc, RedisTimeoutError):
            with self._probe_lock:
                self._hung = True
                self._next_probe = max(self._next_probe, time.monotonic() + PROBE_INTERVAL)
        super().record_failure(exc, epoch)
        if backend is not None and (
            makes_connections_stale(exc) or isinstance(exc, ClusterDownError)
        ):
            backend.refresh_soon()
