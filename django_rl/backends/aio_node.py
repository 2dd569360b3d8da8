"""A node's operations awaited on the event loop: the async twin of ``RedisNode.run``.

The exchange alone is async: what is sent and how a reply is read stay the
algorithms' and the scripts' own, and every state is the node's, shared
with the sync path (its ``Health``, its capabilities, its clock: see
``aio_pools.py`` for the connections). Before an operation, what the sync
path would learn with a blocking call on first use (the server's
capabilities, a due reading of its clock) is learned here with an awaited
one, so the operation itself never blocks the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from redis.asyncio import Redis
from redis.exceptions import (
    AskError,
    MovedError,
    NoScriptError,
    RedisError,
    ResponseError,
    TryAgainError,
)

from django_rl.backends.aio_pipe import Pipe
from django_rl.backends.aio_pools import async_client, async_pipe, open_pipe_of, turnstile
from django_rl.backends.capabilities import UNKNOWN, from_hello, from_server_info
from django_rl.backends.cluster import MAX_REDIRECTS, TRYAGAIN_PAUSE, ClusterBackend
from django_rl.backends.connections import PoolExhausted
from django_rl.backends.node import RedisNode
from django_rl.backends.resp import Transaction
from django_rl.backends.resp import command as encode_command
from django_rl.backends.scripts import EncodedScript, LuaScript

_MULTI, _EXEC = encode_command(("MULTI",)), encode_command(("EXEC",))
_ASKING_COMMAND = encode_command(("ASKING",))

#: Set while ``arun`` follows an ``ASK`` to the node importing a slot: each
#: exchange on the auto-pipelined connection is preceded by ``ASKING`` in the
#: same write (a transaction: before its MULTI, whose commands keep the flag),
#: as ``ClusterMember.asking`` does on the sync path. A context variable: it
#: holds for this decision's task only, not for the others sharing the pipe.
_ASKING: contextvars.ContextVar[bool] = contextvars.ContextVar("django_rl_asking", default=False)

if TYPE_CHECKING:
    from django_rl.backends.base import Backend

P = ParamSpec("P")
T = TypeVar("T")

AsyncOperation = Callable[Concatenate["RedisNode", str, P], Awaitable[T]]

#: The node generation each loop's client was last used in (``RedisNode.replace_connections``).
_generations: weakref.WeakKeyDictionary[Redis, int] = weakref.WeakKeyDictionary()


def arun(
    backend: Backend,
    key: str,
    operation: Callable[Concatenate[RedisNode, str, P], Awaitable[T]],
    *args: P.args,
    **kwargs: P.kwargs,
) -> Awaitable[T]:
    """Await ``operation(node, key, *args)`` on the node that owns ``key``; note its health.

    As ``RedisNode.run``: a failure is recorded on the node (one log line per
    outage, connections replaced after errors that make them suspect), a
    success ends an outage.

    On a cluster, as ``ClusterBackend.run``: the node that owns the key's
    slot; ``MOVED`` followed at once (the table read again in the
    background); ``ASK`` (a migrating slot whose key is not on the source)
    followed at once to the node named, with ``ASKING`` in the same write;
    ``TRYAGAIN`` asked again after ``TRYAGAIN_PAUSE``; at most ``MAX_REDIRECTS``.

    :raises redis.exceptions.RedisError: if Redis cannot answer.

    (A function that returns the awaitable, not a coroutine of its own: one
    frame fewer to enter and to resume on every decision.)
    """
    run = arunner(backend)
    assert run is not None, "no async path for this backend (see async_capable)"
    return run(backend, key, operation, *args, **kwargs)


async def _on_cluster(
    backend: ClusterBackend,
    key: str,
    operation: Callable[Concatenate[RedisNode, str, P], Awaitable[T]],
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """:func:`arun` on a cluster: the node of ``key``'s slot, redirections followed."""
    if backend._table is None:
        # The first read of the slot table (then kept, and read again in the
        # background): once per process and alias, off the loop.
        await sync_to_async(backend.nodes, thread_sensitive=False)()
    node: RedisNode = backend.node_for(key)
    failure: RedisError | None = None
    asking = False
    for _ in range(MAX_REDIRECTS):
        token = _ASKING.set(True) if asking else None
        try:
            return await _on_node(node, key, operation, *args, **kwargs)
        except MovedError as exc:
            failure, node, asking = exc, backend._moved(exc), False
        except AskError as exc:
            # The slot is migrating and the key is not on the source: the
            # node named, with ASKING (the table stays: the slot is the source's).
            failure, node, asking = exc, backend.member_at(exc.host, exc.port), True
        except TryAgainError as exc:
            failure = exc
            await asyncio.sleep(TRYAGAIN_PAUSE)
        finally:
            if token is not None:
                _ASKING.reset(token)
    assert failure is not None
    node.health.answered_with_error(failure, "migrating")
    raise failure


async def _on_node(
    node: RedisNode,
    key: str,
    operation: Callable[Concatenate[RedisNode, str, P], Awaitable[T]],
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    health = node.health
    epoch = health._epoch  # (Health.epoch, inline, as RedisNode.run: on every decision)
    try:
        learning = ready(node)
        if learning is not None:
            await learning
        result = await operation(node, key, *args, **kwargs)
    except RedisError as exc:
        node.record_failure(exc, epoch)
        raise
    if health.down or health._replies_seen:
        node.record_success(epoch)
    return result


def arunner(backend: Backend) -> Callable[..., Awaitable[Any]] | None:
    """Return what :func:`arun` calls for ``backend`` (``None``: it has no async path).

    For callers that run on one backend for good (a policy keeps it): the
    backend's kind is then told once, not on every decision.
    """
    if isinstance(backend, RedisNode):
        return _on_node
    if isinstance(backend, ClusterBackend):
        return _on_cluster
    return None


def async_capable(backend: Backend) -> bool:
    """Return whether ``backend`` has an async path (one server, Sentinel's primary, a cluster)."""
    return arunner(backend) is not None


@contextlib.asynccontextmanager
async def connection(node: RedisNode) -> AsyncIterator[Redis]:
    """The loop's client of ``node``, for one exchange; waits while the pool's size is in use.

    :raises PoolExhausted: when no connection came free for a whole socket
        timeout (``aio_pools.Turnstile``: a busy pool is waited for).
    """
    client = await client_of(node)
    gate = turnstile(client)
    if not await gate.enter():
        raise PoolExhausted(
            f"no connection of the pool came free within {gate.wait} s (async decisions)"
        )
    try:
        yield client
    finally:
        gate.leave()


async def client_of(node: RedisNode) -> Redis:
    """Return the loop's client of ``node``, its idle connections replaced after a suspect error."""
    client = await async_client(node)
    generation = node._generation
    seen = _generations.get(client)
    if seen != generation:  # (set only then: a weak key made per call costs)
        if seen is not None:
            await client.connection_pool.disconnect(inuse_connections=False)
        _generations[client] = generation
    return client


def ready(node: RedisNode) -> Awaitable[None] | None:
    """Return what to await to learn what the operation would otherwise learn blocking.

    ``None``, the usual answer: nothing to learn (no coroutine made). Else
    (see the module) once per loop and node at a time: the loop's other
    decisions wait for that learning (as the sync path's threads wait for
    one thread's), so an outage's end does not start one round trip per
    decision in flight.
    """
    # (The clock's test first: it is not due on almost every decision, and then
    # the settings are not read for CLOCK.)
    if node._capabilities.known is None or (node.clock.due() and not node.app_clock):
        return _learn_once(node)
    return None


async def _learn_once(node: RedisNode) -> None:
    key = (id(asyncio.get_running_loop()), id(node))
    learning = _learning.get(key)
    if learning is not None:
        await asyncio.shield(learning)
        return
    learning = _learning[key] = asyncio.get_running_loop().create_future()
    try:
        await _learn(node)
    except BaseException as exc:
        learning.set_exception(exc)
        learning.exception()  # (retrieved: the waiters, if any, raise it)
        raise
    finally:
        del _learning[key]
    learning.set_result(None)


#: The learnings under way, by (loop, node).
_learning: dict[tuple[int, int], asyncio.Future[None]] = {}


async def _learn(node: RedisNode) -> None:
    learned = node._capabilities
    if learned.known is None:
        learned.settle(await _detect(node))
    clock = node.clock
    if not node.app_clock and clock.due():
        sent = time.monotonic()
        seconds, microseconds = await _ask(node, ("TIME",))
        clock.measured(int(seconds), int(microseconds), sent, time.monotonic())


async def _ask(node: RedisNode, asked: tuple[str, ...]) -> Any:
    """Send one command; return its reply, redis-py's error raised (the pipe if any)."""
    pipe = open_pipe_of(node) or await async_pipe(node)
    if pipe is not None:
        (reply,) = await pipe.exchange(encode_command(asked), 1)
        if isinstance(reply, RedisError):
            raise reply
        return reply
    async with connection(node) as client:
        return await client.execute_command(*asked)  # type: ignore[no-untyped-call]


async def _detect(node: RedisNode) -> Any:
    """``capabilities.detect``, awaited: ``HELLO``, else ``INFO server``, else unknown."""
    try:
        found = from_hello(await _ask(node, ("HELLO",)))
        if found is not None:
            return found
    except ResponseError:
        pass
    try:
        async with connection(node) as client:
            info = await client.info("server")
    except ResponseError:
        return UNKNOWN
    return from_server_info(info) if isinstance(info, dict) else UNKNOWN


async def aeval(
    node: RedisNode, script: LuaScript, keys: Sequence[str], args: Sequence[Any]
) -> Any:
    """Run ``script`` as ``LuaScript.__call__`` does (EVALSHA, EVAL on NOSCRIPT), awaited.

    On the loop's auto-pipelined connection where the node has one
    (``aio_pipe.py``), as the EVALSHA ``LuaScript.encoded`` makes.
    """
    pipe = open_pipe_of(node) or await async_pipe(node)
    if pipe is None:
        return await _pooled_eval(node, script, keys, args)
    (reply,) = await _exchange(pipe, script.encoded(keys, args), 1)
    if isinstance(reply, RedisError):
        if not isinstance(reply, NoScriptError):
            raise reply
        return await _eval_source(pipe, script, keys, args)
    return reply


async def acall(
    node: RedisNode,
    encoded: EncodedScript,
    key: str,
    variable: tuple[int | str, ...],
    read: Callable[[Any], T],
) -> T:
    """``EncodedScript.__call__``, awaited: :func:`aeval` of its EVALSHA for ``key`` with
    the ``variable`` arguments; return ``read(reply)``.

    On the auto-pipelined connection, the bytes ``encoded`` keeps (fixed
    arguments encoded once); the keys and the whole argument list are made
    only where those bytes are not enough (``redis.asyncio``'s pool, NOSCRIPT).
    (``read``: the caller's reading of the reply, done here so that the
    caller can return this coroutine instead of being one of its own: a
    level fewer to enter and to resume on every decision.)
    """
    pipe = open_pipe_of(node) or await async_pipe(node)
    if pipe is None:
        args = (*encoded.fixed, *variable)
        return read(await _pooled_eval(node, encoded.script, encoded.keys(key), args))
    # (_exchange, inline: on every decision of a script algorithm.)
    data = encoded.encode(key, variable)
    exchanged = pipe.exchange(data, 1) if not _ASKING.get() else _asking(pipe, data, 1)
    (reply,) = await exchanged
    if isinstance(reply, RedisError):
        if not isinstance(reply, NoScriptError):
            raise reply
        keys, args = encoded.keys(key), (*encoded.fixed, *variable)
        reply = await _eval_source(pipe, encoded.script, keys, args)
    return read(reply)


async def _eval_source(
    pipe: Pipe, script: LuaScript, keys: Sequence[str], args: Sequence[Any]
) -> Any:
    """After NOSCRIPT (a restarted server, ``SCRIPT FLUSH``): ``EVAL`` of the source, which
    also loads it, so the next EVALSHA finds it."""
    (reply,) = await _exchange(
        pipe, encode_command(("EVAL", script.source, len(keys), *keys, *args)), 1
    )
    if isinstance(reply, RedisError):
        raise reply
    return reply


async def _pooled_eval(
    node: RedisNode, script: LuaScript, keys: Sequence[str], args: Sequence[Any]
) -> Any:
    """:func:`aeval` on ``redis.asyncio``'s pool (TLS, RESP3, Sentinel, ...)."""
    _not_asking()
    async with connection(node) as client:
        try:
            return await client.evalsha(script.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await client.eval(script.source, len(keys), *keys, *args)


async def atransaction(node: RedisNode, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """Run ``commands`` in one MULTI/EXEC (one write); return their replies.

    :raises redis.exceptions.RedisError: for an error reply, as the sync path's
        ``transaction_replies``.
    """
    short = open_pipe_of(node) or await async_pipe(node)
    if short is not None:
        encoded = b"".join([_MULTI, *(encode_command(c) for c in commands), _EXEC])
        return _executed(await _exchange(short, encoded, len(commands) + 2))
    _not_asking()
    async with connection(node) as client:
        pipe = client.pipeline(transaction=True)
        for command in commands:
            pipe.execute_command(*command)
        replies: list[Any] = await pipe.execute()
    return replies


async def arun_transaction(
    node: RedisNode, transaction: Transaction, key: str, values: tuple[Any, ...]
) -> list[Any]:
    """:func:`atransaction` of ``transaction`` with ``values`` in its slots (its own bytes on
    the auto-pipelined connection, as ``KeptConnectionClient.run_transaction``)."""
    short = open_pipe_of(node) or await async_pipe(node)
    if short is None:
        return await atransaction(node, transaction.filled(key, values))
    count = len(transaction.commands) + 2
    return _executed(await _exchange(short, transaction.encode(key, values), count))


def _exchange(pipe: Pipe, encoded: bytes, count: int) -> Awaitable[list[Any]]:
    """``pipe.exchange``, preceded by ``ASKING`` in the same write while following an ``ASK``.

    (Returns the pipe's own awaitable, the usual case: no frame of its own.)
    """
    if not _ASKING.get():
        return pipe.exchange(encoded, count)
    return _asking(pipe, encoded, count)


async def _asking(pipe: Pipe, encoded: bytes, count: int) -> list[Any]:
    asked, *replies = await pipe.exchange(_ASKING_COMMAND + encoded, count + 1)
    if isinstance(asked, RedisError):
        raise asked
    return replies


def _not_asking() -> None:
    """Refuse to follow an ``ASK`` on ``redis.asyncio``'s pool (TLS, RESP3): the decision fails.

    A pooled connection cannot be told that ``ASKING`` and the command go
    together; the decision then follows the outage rules (``fail_open``,
    ``fallback_rate``) for the seconds a slot's migration lasts.
    """
    if _ASKING.get():
        raise RedisError("an ASK is followed on the auto-pipelined connection only")


def _executed(answered: list[Any]) -> list[Any]:
    """Return EXEC's replies from a MULTI/EXEC's ``answered``; raise its first error."""
    done = answered[-1]
    if isinstance(done, RedisError):  # EXECABORT: the first refusal says why
        refused = (r for r in answered if isinstance(r, RedisError) and r is not done)
        raise next(refused, done)
    for reply in done:
        if isinstance(reply, RedisError):
            raise reply
    return list(done)


async def apipeline(node: RedisNode, queue: Callable[[Any], T]) -> tuple[T, list[Any]]:
    """``RedisNode.pipeline``, awaited: the commands ``queue`` puts on a pipeline, one round trip.

    NOSCRIPT inside it: every script is loaded and the commands sent again
    (reads, or writes that may run twice), as ``scripts.replies_with_scripts``.
    """
    _not_asking()
    async with connection(node) as client:
        pipe = client.pipeline(transaction=False)
        queued = queue(pipe)
        commands = list(pipe.command_stack)
        replies: list[Any] = await pipe.execute(raise_on_error=False)
        if any(isinstance(reply, NoScriptError) for reply in replies):
            for script in LuaScript.instances:
                await client.script_load(script.source)
            pipe = client.pipeline(transaction=False)
            pipe.command_stack.extend(commands)
            replies = await pipe.execute(raise_on_error=False)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return queued, replies
