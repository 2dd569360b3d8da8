"""Kept clients shared by threads, for a node whose pool is full (``RedisNode.client``)."""

from __future__ import annotations

import math
import threading
import time
import weakref

from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from django_rl.backends.connections import (
    KeptConnectionClient,
    PoolExhausted,
    discard,
    pool_full,
)
from django_rl.backends.redis_py import would_block

#: Seconds between two tries of a full pool that no kept connection of the
#: node can be shared from (the application's own calls hold it all).
POOL_POLL = 0.005


class SharedClients:
    """How a node gives each thread a kept client: its own, or one shared when the pool is full.

    The half of ``RedisNode`` that makes, shares and lets go of kept clients;
    ``RedisNode.client`` says when each is used. A node provides what is
    declared here.
    """

    #: Bumped when the connections are suspect (``RedisNode.record_failure``).
    _generation: int
    #: Every thread's kept client, for threads that find the pool full to share.
    _kept: weakref.WeakSet[KeptConnectionClient]
    _kept_lock: threading.Lock

    @property
    def pooled_client(self) -> Redis:
        """Return the redis-py client of the server's pool."""
        raise NotImplementedError("pooled_client")

    def _reached(self, connection: object) -> bool:
        """Note where a kept connection connected; return whether that is a new address."""
        raise NotImplementedError("_reached")

    def forget_capabilities(self) -> None:
        """Make the next call learn the server's capabilities again."""
        raise NotImplementedError("forget_capabilities")

    def _take_client(self) -> KeptConnectionClient:
        """Return a new client of this thread's own or, the pool being full, one to share.

        :raises redis.exceptions.RedisError: as :attr:`client`.
        """
        deadline: float | None = None
        timeout: float | None = None
        while True:
            pool = self.pooled_client.connection_pool
            # (A BlockingConnectionPool would wait its own timeout: share a kept one instead.)
            if not would_block(pool):
                generation = self._generation
                try:
                    client = self._make_client()
                except RedisConnectionError as exc:
                    if not pool_full(exc):
                        raise
                else:
                    if self._reached(client.connection):
                        generation = self._generation  # it reaches the new primary already
                    client.generation = generation
                    with self._kept_lock:
                        self._kept.add(client)
                    return client
            shared = self._share()
            if shared is not None:
                return shared
            # Nothing to share: wait for a connection of the application's to come back.
            now = time.monotonic()
            if deadline is None:
                timeout = pool.connection_kwargs.get("socket_timeout")
                deadline = math.inf if timeout is None else now + timeout
            if now >= deadline:
                raise PoolExhausted(
                    f"no connection of the pool came free in {timeout:g} s (the socket timeout)"
                )
            time.sleep(min(POOL_POLL, deadline - now))

    def _share(self) -> KeptConnectionClient | None:
        """Return the current kept client the fewest threads hold, held once more; or ``None``."""
        generation = self._generation
        with self._kept_lock:
            current = [
                client
                for client in self._kept
                if client.generation == generation and client.connection is not None
            ]
            if not current:
                return None
            client = min(current, key=lambda kept: kept.holders)
            client.holders += 1
        return client

    def _let_go(self, client: KeptConnectionClient) -> None:
        """Stop holding ``client`` (its generation is over); close it if no other thread holds it.

        A thread that held it and has ended never let go: the client is then
        closed when the last reference to it goes, and its connection closed
        first all the same (``suspect``), so that it never goes back to the
        pool as it is.
        """
        client.suspect = True
        with self._kept_lock:
            client.holders -= 1
            last = client.holders <= 0
            if last:
                self._kept.discard(client)
        if last:
            discard(client)

    def _make_client(self) -> KeptConnectionClient:
        """Return a new kept-connection client, connected (redis-py connects it from the pool)."""
        client = KeptConnectionClient(
            connection_pool=self.pooled_client.connection_pool, single_connection_client=True
        )
        # Its reconnections (after a broken connection) are checked too.
        client.connection.register_connect_callback(self._reached)  # type: ignore[union-attr]
        # A restarted server may be another version: its capabilities are learned again.
        client.on_reconnect = self.forget_capabilities
        return client
