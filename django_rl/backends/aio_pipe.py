"""An auto-pipelined connection per event loop and node: the async decisions' short path.

``redis.asyncio`` checks a connection out of its pool, encodes and writes
each command, and reads its reply, per command: several times the sync
path's CPU on the loop, and one write per decision. A decision's exchange is
one command (EVALSHA) or one MULTI/EXEC, encoded by django_rl itself
(``resp.py``, as the sync path's short path), so here it is written on one
connection per loop and node shared by every decision of the loop, and the
replies are read in order (hiredis, with redis-py's errors):

* **auto-pipelining**: a command made ready while nothing is in flight is
  written at once; those made ready while replies are awaited go out
  together, in one write at the end of the loop's turn (``call_soon``,
  never a timer), as ioredis' auto-pipelining does: a write per decision
  at most, far fewer under load (:attr:`Pipe.writes`);
* a reply that does not come within the socket timeout fails its waiter
  (``TimeoutError``) and closes the connection: every waiter behind it
  fails at once (their replies could no longer be matched), and the next
  exchange connects anew. One timer watches the oldest waiter's deadline
  (replies come in order, so it is the first to pass), not a timer per
  exchange;
* a waiter cancelled (its request gone) leaves its reply to be read and
  dropped in turn: the connection stays good.

Used for plain TCP and Unix-socket connections speaking RESP2 (the common
case); TLS, RESP3, a credential provider and Sentinel keep ``redis.asyncio``
(``aio_pools.py``). Nothing else talks RESP here but ``resp.py``'s bytes.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

from redis import connection as sync_connection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from django_rl.backends.redis_py import reply_reader
from django_rl.backends.resp import command

#: The connection arguments this short path knows how to honour.
_KNOWN = frozenset(
    {
        "host",
        "port",
        "path",
        "db",
        "username",
        "password",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_keepalive",
        "socket_keepalive_options",
        "socket_type",
        "retry_on_timeout",
        "retry_on_error",
        "encoding",
        "encoding_errors",
        "decode_responses",
        "parser_class",
        "socket_read_size",
        "health_check_interval",
        "client_name",
        "lib_name",
        "lib_version",
        "driver_info",
        "retry",
        "redis_connect_func",
        "encoder_class",
        "protocol",
        "connection_pool",
        "event_dispatcher",
        "maint_notifications_config",
        "maint_notifications_pool_handler",
        "credential_provider",
        "cache",
        # redis-py 7+'s bookkeeping of maintenance notices, nothing on the wire:
        "orig_host_address",
        "orig_socket_timeout",
        "orig_socket_connect_timeout",
        "himport_registry",
        "oss_cluster_maint_notifications_handler",
    }
)


def pipe_possible(pool: Any) -> bool:
    """Return whether a node's sync ``pool`` can have a :class:`Pipe` (see the module)."""
    try:
        reply_reader()
    except ImportError:
        return False
    if getattr(pool, "sentinel_manager", None) is not None:
        return False
    if pool.connection_class not in (
        sync_connection.Connection,
        sync_connection.UnixDomainSocketConnection,
    ):
        return False
    kwargs = pool.connection_kwargs
    if set(kwargs) - _KNOWN or kwargs.get("credential_provider") is not None:
        return False
    if kwargs.get("decode_responses") or str(kwargs.get("protocol") or 2) != "2":
        return False
    return str(kwargs.get("encoding") or "utf-8").lower().replace("_", "-") in ("utf-8", "utf8")


class Pipe(asyncio.Protocol):
    """One connection, shared by a loop's decisions on one node (see the module)."""

    def __init__(self, timeout: float | None) -> None:
        self.timeout = timeout
        self.transport: asyncio.Transport | None = None
        #: The loop it serves (set once connected).
        self.loop: asyncio.AbstractEventLoop | None = None
        self._reader = reply_reader()
        #: Each waiter: its future, the replies it expects, those read so far,
        #: and when it times out (the loop's clock; 0.0 without a timeout).
        self._waiters: collections.deque[
            tuple[asyncio.Future[list[Any]], int, list[Any], float]
        ] = collections.deque()
        self._buffer: list[bytes] = []
        self._flush_soon = False
        #: The timer at the oldest waiter's deadline (None: no waiter watched).
        self._watchdog: asyncio.TimerHandle | None = None
        self.closed = False
        #: Socket writes so far (benches and tests: writes per decision).
        self.writes = 0

    # -- asyncio.Protocol ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.loop = asyncio.get_running_loop()  # (a pipe serves one loop)

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        reader.feed(data)
        gets = reader.gets
        waiters = self._waiters
        while waiters:
            # The oldest waiter's replies, read in a loop of their own: a
            # MULTI/EXEC's come together (+OK, QUEUED..., EXEC's array).
            future, count, replies, _ = waiters[0]
            while len(replies) < count:
                reply = gets()
                if reply is False:
                    return  # the rest of them in a later read
                replies.append(reply)
            waiters.popleft()
            if not future.done():
                future.set_result(replies)
        if gets() is not False:  # (nothing asked for it: the connection is out of step)
            self.close(RedisConnectionError("a reply nothing asked for"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(RedisConnectionError(f"Connection closed by server ({exc or 'EOF'})"))

    # -- exchanges ------------------------------------------------------------

    def exchange(self, encoded: bytes, count: int) -> asyncio.Future[list[Any]]:
        """Send ``encoded`` (``count`` commands); return the future of their replies
        (errors in place).

        (The future itself, not a coroutine awaiting it: one frame fewer to
        enter and to resume on every decision.)

        :raises redis.exceptions.ConnectionError: the pipe is closed (at once);
            awaited: the connection is lost.
        :raises redis.exceptions.TimeoutError: awaited: no reply within the
            socket timeout (the connection is closed).
        """
        if self.closed:
            raise RedisConnectionError("Connection closed")
        loop = self.loop
        assert loop is not None  # (connected: open_pipe returns a pipe once connected)
        future: asyncio.Future[list[Any]] = loop.create_future()
        waiters = self._waiters
        idle = not waiters  # nothing in flight (then nothing is buffered either)
        if self.timeout is None:
            waiters.append((future, count, [], 0.0))
        else:
            deadline = loop.time() + self.timeout
            waiters.append((future, count, [], deadline))
            if self._watchdog is None:
                # (One timer, not one per exchange, nor wait_for's task per exchange.)
                self._watchdog = loop.call_at(deadline, self._watch)
        if idle:
            # (_write, inline: this runs on every exchange, and a frame costs.)
            self.transport.write(encoded)  # type: ignore[union-attr]  # (connected, as above)
            self.writes += 1
        else:
            self._buffer.append(encoded)
            if not self._flush_soon:
                self._flush_soon = True
                loop.call_soon(self._flush)
        return future

    def _watch(self) -> None:
        """The oldest waiter's deadline: passed without its reply, close (see the module).

        Replies come in order, so the oldest waiter's deadline passes first;
        once it has its reply, the timer waits for the next oldest's.
        """
        self._watchdog = None
        if not self._waiters or self.loop is None:
            return
        deadline = self._waiters[0][3]
        if deadline <= self.loop.time():
            self.close(RedisTimeoutError("Timeout reading from socket"))
        else:
            self._watchdog = self.loop.call_at(deadline, self._watch)

    def _flush(self) -> None:
        self._flush_soon = False
        if self.closed or not self._buffer:
            return
        data = b"".join(self._buffer) if len(self._buffer) > 1 else self._buffer[0]
        self._buffer.clear()
        self._write(data)

    def _write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)
        self.writes += 1

    def close(self, error: Exception | None = None) -> None:
        """Close the connection; fail every waiter with ``error`` (a ``ConnectionError``)."""
        if self.transport is not None:
            self.transport.abort()
        self._fail(error or RedisConnectionError("Connection closed"))

    def _fail(self, error: Exception) -> None:
        self.closed = True
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        while self._waiters:
            future, _, _, _ = self._waiters.popleft()
            if not future.done():
                future.set_exception(error)
        self._buffer.clear()


async def open_pipe(kwargs: dict[str, Any]) -> Pipe:
    """Connect as the sync pool's connections do (``kwargs``): address, AUTH, SELECT, name.

    :raises redis.exceptions.RedisError: if it cannot connect or is refused.
    """
    loop = asyncio.get_running_loop()
    timeout = kwargs.get("socket_timeout")
    connect_timeout = kwargs.get("socket_connect_timeout") or timeout
    pipe = Pipe(timeout)
    try:
        if kwargs.get("path"):
            made = loop.create_unix_connection(lambda: pipe, kwargs["path"])
        else:
            made = loop.create_connection(
                lambda: pipe, kwargs.get("host", "localhost"), int(kwargs.get("port", 6379))
            )
        await asyncio.wait_for(made, connect_timeout)
    except asyncio.TimeoutError:
        raise RedisTimeoutError("Timeout connecting to server") from None
    except OSError as exc:
        raise RedisConnectionError(f"Error connecting to Redis: {exc}") from exc
    hello: list[tuple[Any, ...]] = []
    if kwargs.get("password"):
        user = kwargs.get("username")
        hello.append(("AUTH", user, kwargs["password"]) if user else ("AUTH", kwargs["password"]))
    if kwargs.get("db"):
        hello.append(("SELECT", kwargs["db"]))
    if kwargs.get("client_name"):
        hello.append(("CLIENT", "SETNAME", kwargs["client_name"]))
    if hello:
        replies = await pipe.exchange(b"".join(command(c) for c in hello), len(hello))
        for reply in replies:
            if isinstance(reply, RedisError):
                pipe.close()
                raise reply
    return pipe
