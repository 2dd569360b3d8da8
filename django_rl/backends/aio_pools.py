"""Async connections: a ``redis.asyncio`` client per node and event loop.

Made from the node's own sync pool, which django-redis built from the
``CACHES`` alias: the same connection class (TCP, TLS, a Unix socket), the
same keyword arguments (address, db, username and password, TLS options,
socket and connect timeouts, client name) and the same pool size. A
Sentinel-managed primary gets a ``redis.asyncio`` Sentinel pool that asks
the same sentinels, with the same ``SENTINEL_KWARGS``, for the same service.

**One pool per event loop.** ``redis.asyncio`` connections belong to the loop
that opened them, so each loop that decides gets its own client per node,
kept in a table of this module. A loop lets go of them:

* when it shuts down its async generators (``asyncio.run``, ``Runner.close``,
  uvicorn's and Django's own loops do): a suspended async generator started
  on the loop (:func:`_closing`) is closed then, and closes every client of
  the loop on the loop itself;
* otherwise, when another loop next asks for a client and finds the old
  loop closed or gone: its sockets are closed at once (``redis_py.py``).

Everything else a node knows (its health, capabilities, clock, the deny
cache and fallback counts above it) is the sync path's: one state per process.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import weakref
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from redis import connection as sync_connection
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio import connection as async_connection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from django_rl.backends.aio_pipe import Pipe, open_pipe, pipe_possible
from django_rl.backends.redis_py import abandon_async_pool, abandon_transport

if TYPE_CHECKING:
    from django_rl.backends.node import RedisNode

#: The ``redis.asyncio`` connection class of each sync one django-redis uses.
ASYNC_CLASSES: dict[type[Any], type[Any]] = {
    sync_connection.Connection: async_connection.Connection,
    sync_connection.SSLConnection: async_connection.SSLConnection,
    sync_connection.UnixDomainSocketConnection: async_connection.UnixDomainSocketConnection,
}

#: Connection arguments never carried over: the sync pool's own objects (and a
#: sync cluster client's connect hook, ``redis_connect_func``).
_NOT_CARRIED = frozenset(
    {
        "connection_pool",
        "parser_class",
        "retry",
        "event_dispatcher",
        "redis_connect_func",
        "maint_notifications_pool_handler",
        "maint_notifications_config",
    }
)


class _LoopClients:
    """The clients of one event loop, by node; closed with the loop (see the module)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = weakref.ref(loop)
        self.clients: weakref.WeakKeyDictionary[RedisNode, Redis] = weakref.WeakKeyDictionary()
        #: Each node's auto-pipelined connection (``aio_pipe.py``) and its generation.
        self.pipes: weakref.WeakKeyDictionary[RedisNode, tuple[Pipe, int]] = (
            weakref.WeakKeyDictionary()
        )
        #: Pipes being opened, by node: the decisions that need one meanwhile wait for it.
        self.opening: weakref.WeakKeyDictionary[RedisNode, asyncio.Future[Pipe]] = (
            weakref.WeakKeyDictionary()
        )
        self.closer: AsyncIterator[None] | None = None

    def abandoned(self) -> bool:
        loop = self.loop()
        return loop is None or loop.is_closed()

    def abandon(self) -> None:
        """Close every socket now, without the loop (which is closed or gone)."""
        for client in list(self.clients.values()):
            for pool in _pools_of(client):
                abandon_async_pool(pool)
        self.clients.clear()
        for pipe, _ in list(self.pipes.values()):
            if pipe.transport is not None:
                abandon_transport(pipe.transport)
        self.pipes.clear()


#: Every loop's clients, by ``id(loop)`` (checked against the loop itself).
_loops: dict[int, _LoopClients] = {}


async def async_client(node: RedisNode) -> Redis:
    """Return the running loop's ``redis.asyncio`` client of ``node`` (made on first use).

    Nothing connects here: the first command does.
    """
    loop = asyncio.get_running_loop()
    state = _loops.get(id(loop))
    if state is not None and state.loop() is loop:
        client = state.clients.get(node)
        if client is not None:
            return client
    else:
        state = await _new_loop(loop)
    pool = async_pool(node)
    client = state.clients[node] = Redis(connection_pool=pool)
    # The pool's size, as a turnstile: a decision beyond it waits for a
    # connection (``aio_node.connection``) while the connections come free
    # (``Turnstile``); none for a whole socket timeout: ``PoolExhausted``.
    wait = node.pooled_client.connection_pool.connection_kwargs.get("socket_timeout")
    _turnstiles[client] = Turnstile(pool.max_connections, wait)
    return client


class Turnstile:
    """A pool's size for the loop's decisions: at most ``size`` exchanges at once.

    A decision beyond it waits for a connection as long as connections keep
    coming free (the pool busy, not stuck: never degraded because it is
    full, however many wait); when none has come free for a whole
    ``wait`` (the socket timeout: every connection held by a call that
    hangs), it gives up with ``PoolExhausted`` (the outage rules then apply).
    """

    __slots__ = ("freed", "gate", "wait")

    def __init__(self, size: int, wait: float | None) -> None:
        self.gate = asyncio.Semaphore(size)
        self.wait = wait
        #: Connections given back so far (the progress a waiter looks for).
        self.freed = 0

    async def enter(self) -> bool:
        """Take a connection's turn; ``False`` if none came free for a whole ``wait``."""
        gate = self.gate
        if not gate.locked():
            await gate.acquire()  # (free: no wait, no task)
            return True
        while True:
            seen = self.freed
            try:
                await asyncio.wait_for(gate.acquire(), self.wait)
                return True
            except asyncio.TimeoutError:
                if self.freed == seen:
                    return False

    def leave(self) -> None:
        self.freed += 1
        self.gate.release()


def open_pipe_of(node: RedisNode) -> Pipe | None:
    """Return the running loop's pipe to ``node`` if one is open and current, else ``None``.

    :func:`async_pipe`'s usual answer without a coroutine (``None``: ask it),
    from the pipe it last returned for ``node`` (``RedisNode.loop_pipe``):
    the running loop's, still open, made since the node last replaced its
    connections. Several loops deciding on one node take turns there, each
    finding its own through :func:`async_pipe` when the last was another's.
    """
    last = node.loop_pipe
    if last is not None:
        pipe, made_in = last
        if (
            pipe.loop is asyncio.get_running_loop()
            and not pipe.closed
            and made_in == node._generation
        ):
            return pipe  # type: ignore[no-any-return]
    return None


async def async_pipe(node: RedisNode) -> Pipe | None:
    """Return the running loop's auto-pipelined connection to ``node`` (``aio_pipe.py``).

    ``None`` where the node's connections need ``redis.asyncio`` (TLS, RESP3,
    Sentinel, ...). A pipe that closed (a timeout, a lost connection), or
    that predates the node's last replacement of its connections, is
    replaced; decisions that ask meanwhile wait for the one being opened.

    :raises redis.exceptions.RedisError: if it cannot connect.
    """
    loop = asyncio.get_running_loop()
    state = _loops.get(id(loop))
    if state is None or state.loop() is not loop:
        state = await _new_loop(loop)
    found = state.pipes.get(node)
    generation = node._generation
    if found is not None:
        pipe, made_in = found
        if not pipe.closed and made_in == generation:
            node.loop_pipe = found
            return pipe
        pipe.close()
        del state.pipes[node]
    opening = state.opening.get(node)
    if opening is not None:
        return await asyncio.shield(opening)
    pool = node.pooled_client.connection_pool
    if node in _no_pipe or not pipe_possible(pool):
        _no_pipe.add(node)
        return None
    future: asyncio.Future[Pipe] = loop.create_future()
    state.opening[node] = future
    try:
        pipe = await open_pipe(dict(pool.connection_kwargs))
    except BaseException as exc:
        future.set_exception(exc)
        future.exception()  # (retrieved: the waiters, if any, raise it)
        raise
    finally:
        del state.opening[node]
    future.set_result(pipe)
    state.pipes[node] = node.loop_pipe = (pipe, generation)
    return pipe


#: Nodes whose connections a pipe cannot make (checked once).
_no_pipe: weakref.WeakSet[RedisNode] = weakref.WeakSet()


def turnstile(client: Redis) -> Turnstile:
    """Return the :class:`Turnstile` of ``client``'s pool."""
    return _turnstiles[client]


_turnstiles: weakref.WeakKeyDictionary[Redis, Turnstile] = weakref.WeakKeyDictionary()


async def _new_loop(loop: asyncio.AbstractEventLoop) -> _LoopClients:
    for key, other in list(_loops.items()):
        if other.abandoned():
            del _loops[key]
            other.abandon()
    state = _LoopClients(loop)
    closer = _closing(state)
    # Started here, so the loop knows it (its async generator hooks) and
    # closes it when it shuts down: the clients are closed on the loop then.
    await closer.__anext__()
    state.closer = closer
    _loops[id(loop)] = state
    return state


async def _closing(state: _LoopClients) -> AsyncIterator[None]:
    try:
        yield
    finally:
        loop = state.loop()
        if loop is not None and _loops.get(id(loop)) is state:
            del _loops[id(loop)]
        for client in list(state.clients.values()):
            for pool in _pools_of(client):
                await pool.disconnect()
        state.clients.clear()
        for pipe, _ in list(state.pipes.values()):
            pipe.close()
        state.pipes.clear()


def _pools_of(client: Redis) -> list[Any]:
    """Return the pools a client holds: its own, and a Sentinel pool's sentinels' pools."""
    pool = client.connection_pool
    manager = getattr(pool, "sentinel_manager", None)
    sentinels = [] if manager is None else [s.connection_pool for s in manager.sentinels]
    return [pool, *sentinels]


def async_pool(node: RedisNode) -> Any:
    """Return a new ``redis.asyncio`` pool of ``node``, made from its sync pool (see the module)."""
    pool = node.pooled_client.connection_pool
    size = pool.max_connections
    sentinels = getattr(pool, "sentinel_manager", None)
    if sentinels is not None:
        return _sentinel_pool(pool, sentinels, size)
    connection_class = ASYNC_CLASSES.get(pool.connection_class)
    if connection_class is None:
        for sync_class, async_class in ASYNC_CLASSES.items():
            if issubclass(pool.connection_class, sync_class):
                connection_class = async_class
    if connection_class is None:
        raise TypeError(f"no redis.asyncio connection for {pool.connection_class.__name__}")
    kwargs = _carried(pool.connection_kwargs, connection_class)
    return ConnectionPool(connection_class=connection_class, max_connections=size, **kwargs)


def _sentinel_pool(pool: Any, manager: Any, size: int) -> Any:
    from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool, SentinelManagedConnection

    addresses = [
        (s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
        for s in manager.sentinels
    ]
    sentinel_kwargs = _carried(manager.sentinel_kwargs, async_connection.Connection)
    asker = Sentinel(  # type: ignore[no-untyped-call,unused-ignore]  # (typed from redis-py 8.2)
        addresses, min_other_sentinels=manager.min_other_sentinels, sentinel_kwargs=sentinel_kwargs
    )
    kwargs = _carried(pool.connection_kwargs, SentinelManagedConnection)
    return SentinelConnectionPool(  # type: ignore[no-untyped-call]
        pool.service_name, asker, max_connections=size, **kwargs
    )


def _carried(kwargs: dict[str, Any], connection_class: type[Any]) -> dict[str, Any]:
    """Return the arguments of ``kwargs`` that ``connection_class`` takes; never retry."""
    accepted = _accepted(connection_class)
    carried = {k: v for k, v in kwargs.items() if k in accepted and k not in _NOT_CARRIED}
    # A decision is never sent twice by the client (as on the sync path).
    carried["retry"] = Retry(NoBackoff(), 0)
    return carried


def _accepted(connection_class: type[Any]) -> set[str]:
    names: set[str] = set()
    for cls in connection_class.__mro__:
        init = cls.__dict__.get("__init__")
        if init is not None:
            names.update(inspect.signature(init).parameters)
    names.discard("self")
    names.discard("kwargs")
    return names


def forget_loops() -> None:
    """Drop every loop's clients without closing them (a forked child: the parent's sockets)."""
    _loops.clear()


def loops_held() -> int:
    """Return how many event loops have clients here (tests: none after a loop closes)."""
    return sum(1 for state in _loops.values() if not state.abandoned())


os.register_at_fork(after_in_child=forget_loops)
