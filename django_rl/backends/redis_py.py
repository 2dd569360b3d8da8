"""redis-py's private layout, read here and nowhere else in django_rl.

The kept connection's short path (``connections.py``) does what redis-py's
``send_packed_command`` and its hiredis parser's ``read_response`` do, with
none of the layers between them, which cost a decision several µs of CPU
(docs/performance.md). That means reading what redis-py does not publish: a
connection's ``_sock``, ``_parser``, ``_host_error()`` and
``_should_reconnect``; its hiredis parser's ``_reader``, ``_buffer``,
``_next_response`` and ``_hiredis_PushNotificationType``; the module's
``NOT_ENOUGH_DATA``; a retry's ``_retries`` (redis-py 5.0); redis-py 7's
metrics ``recorder``; a ``BlockingConnectionPool``'s queue. Every such read is
in this module, and ``tests/backends/test_redis_py.py`` checks each against the
installed redis-py (run it on every redis-py version the project supports,
``redis>=5.0``): an upgrade that moves one fails there, loudly, instead of a
decision quietly taking redis-py's slower way or breaking.

Where the layout is not as expected (another parser, health checks, an
unknown redis-py), :func:`socket_path_possible` says no and redis-py's own
public ways are used.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import redis
from redis import BlockingConnectionPool
from redis import exceptions as redis_exceptions
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from django_rl.backends.socket_writes import failed_write, write

#: redis-py's major and minor version.
VERSION = tuple(int(part) for part in redis.__version__.split(".")[:2] if part.isdigit())
#: Whether redis-py's hiredis parser may hold a reply read ahead (``_next_response``):
#: before redis-py 8 (its ``can_read()`` reads one); redis-py 8 has no such attribute.
READS_AHEAD = VERSION < (8, 0)

try:
    #: What hiredis makes of a RESP3 push message (hiredis 3.2+; redis-py's
    #: parser takes the same type, ``_hiredis_PushNotificationType``).
    from hiredis import PushNotification as PUSH
except ImportError:  # no hiredis (the socket path is never taken), or an older one
    PUSH: Any = None  # type: ignore[no-redef]

try:
    from redis._parsers.hiredis import NOT_ENOUGH_DATA
except ImportError:  # an older redis-py: the socket path is never taken
    NOT_ENOUGH_DATA: Any = object()  # type: ignore[no-redef]

#: redis-py's error for a pool at ``max_connections`` (redis-py 5.1+; a
#: plain ``ConnectionError`` before), where it has one (``()`` matches nothing).
MAX_CONNECTIONS: Any = getattr(redis_exceptions, "MaxConnectionsError", ())


def socket_path_possible(connection: Any) -> bool:
    """Return whether :class:`SocketPath` may stand in for redis-py's send and read.

    Only for redis-py's hiredis parser as redis-py 5 to 8 lay it out (the
    connection's socket, the parser's hiredis reader and buffer, its "not
    enough data" sentinel), on a connection without health checks (redis-py
    would PING before a command). Anything else keeps redis-py's own way.
    """
    try:
        from redis._parsers import hiredis as parsers
    except ImportError:  # no hiredis module in this redis-py
        return False
    parser = getattr(connection, "_parser", None)
    return (
        type(parser) is getattr(parsers, "_HiredisParser", None)
        and NOT_ENOUGH_DATA is getattr(parsers, "NOT_ENOUGH_DATA", None)
        and not connection.health_check_interval
        and hasattr(parser, "_reader")
        and hasattr(parser, "_buffer")
        and hasattr(connection, "_sock")
    )


def direct_possible(connection: Any) -> bool:
    """Return whether commands on ``connection`` may skip redis-py's ``execute_command``.

    Only where it would do nothing more: a connection that encodes text as
    UTF-8 (redis-py's default; the short path encodes it so, ``resp.py``),
    never retries (django-redis' default; decisions must not be sent twice by
    redis-py), and redis-py's OpenTelemetry metrics off (redis-py 7 looks
    them up on every command; a client made after they are turned on goes
    redis-py's way, so it records django_rl's commands too).
    """
    encoding = getattr(getattr(connection, "encoder", None), "encoding", "utf-8")
    if str(encoding).lower().replace("_", "-") not in ("utf-8", "utf8"):
        return False  # resp.py encodes text as UTF-8, as redis-py does by default
    if retries(getattr(connection, "retry", None)) != 0:
        return False
    try:
        from redis.observability import recorder
    except ImportError:  # redis-py before 7: no such metrics
        return True
    try:
        return recorder._get_or_create_collector() is None
    except Exception:  # a change of redis-py's internals: take its own way
        return False


def retries(retry: object) -> int | None:
    """Return how often a redis-py ``Retry`` retries (-1: forever); ``None`` for no ``Retry``."""
    if retry is None:
        return None
    get_retries = getattr(retry, "get_retries", None)  # redis-py 5.0 has only _retries
    found = get_retries() if get_retries is not None else getattr(retry, "_retries", None)
    return None if found is None else int(found)


def connected_socket(connection: Any) -> Any:
    """Return ``connection``'s socket, or ``None`` when it is not connected."""
    return connection._sock


def would_block(pool: object) -> bool:
    """Return whether ``pool`` is a ``BlockingConnectionPool`` with no connection to give.

    Its ``get_connection`` would wait its own ``timeout`` (20 s by default)
    for one.
    """
    if not isinstance(pool, BlockingConnectionPool):
        return False
    queue: Any = getattr(pool, "pool", None)
    return queue is not None and bool(queue.empty())


#: A pool's locks redis-py takes when it finds itself in a forked child (``_checkpid``).
_POOL_LOCKS = ("_fork_lock", "_lock")
_RLOCK = type(threading.RLock())
_LOCK = type(threading.Lock())


def unlock_pool_in_child(pool: object) -> None:
    """Give a forked child's copy of ``pool`` new locks; call only in the child, at once.

    A lock another thread of the parent held at the fork (its history or
    metrics thread taking a connection) stays held in the child for good,
    and redis-py 8's ``reset`` after a fork takes the pool's ``_lock``: the
    child's first command would wait forever. Right after the fork the
    child has one thread, so nothing else can hold them.
    """
    for name in _POOL_LOCKS:
        lock = getattr(pool, name, None)
        if isinstance(lock, _RLOCK):
            setattr(pool, name, threading.RLock())
        elif isinstance(lock, _LOCK):
            setattr(pool, name, threading.Lock())
        elif isinstance(lock, threading.Condition):
            setattr(pool, name, threading.Condition())


class SocketPath:
    """The exchange of encoded commands straight on one connection's socket.

    Only where :func:`socket_path_possible`. A client learns it once
    (``KeptConnectionClient``) and calls :meth:`exchange`, a bound method:
    no frame between the retry helper and the socket.
    """

    __slots__ = ("connection",)

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    def exchange(self, encoded: bytes, count: int) -> list[Any]:
        """Write ``encoded`` on the connection's socket; return its ``count`` replies.

        What redis-py's ``send_packed_command`` then ``count`` calls of its
        parser's ``read_response`` do, errors and all: a connection not
        connected is connected first (redis-py's ``connect``, its handshake
        included); a failed write or read closes the connection and raises
        redis-py's ``TimeoutError`` or ``ConnectionError`` naming the server;
        an error reply is returned in its place, except one that means the
        server cannot serve (``LOADING``: a ``ConnectionError``; alone, or
        first in an array, as EXEC's), raised as redis-py raises it; RESP3
        push messages among the replies go to redis-py's handlers, and a
        server's maintenance notice is acted on (:func:`reconnect_if_told`).
        One write, then reads until the replies are in: the few system calls
        a round trip needs.
        """
        connection = self.connection
        sock = connection._sock
        if sock is None:
            connection.connect()  # as redis-py's send does (raises its ConnectionError)
            sock = connection._sock
        parser = connection._parser
        try:
            write(sock, encoded)
        except BaseException as exc:
            error = failed_write(connection, exc)  # (it closes the connection)
            reconnect_if_told(connection)
            if error is exc:
                raise
            raise error from None
        pushed = False
        try:
            if READS_AHEAD and parser._next_response is not NOT_ENOUGH_DATA:
                # redis-py before 8 may hold a reply its can_read() read ahead.
                replies = [parser.read_response() for _ in range(count)]
            else:
                # Read first: the replies were just asked for, so the reader
                # holds none of them yet (a push message it holds is read
                # after the read, as before it).
                buffer = parser._buffer
                read = sock.recv_into(buffer)
                if not read:
                    raise RedisConnectionError("Connection closed by server.")
                reader = parser._reader
                reader.feed(buffer, 0, read)
                reply = reader.gets()
                if count == 1 and reply is not NOT_ENOUGH_DATA and type(reply) is not PUSH:
                    replies = [reply]  # the usual exchange: one read, its one reply
                else:
                    replies, pushed = self._rest(sock, parser, reply, count)
            # Error replies that mean the server cannot serve (LOADING and the
            # like), alone or first in EXEC's array, raised as redis-py does:
            # looked for in a decision's one reply, or in every reply of several.
            last = replies[-1]
            if isinstance(last, RedisConnectionError):
                raise last
            if count > 1:
                if type(last) is list and last and isinstance(last[0], RedisConnectionError):
                    raise last[0]
                for reply in replies:
                    if isinstance(reply, RedisConnectionError):
                        raise reply
        except BaseException as exc:
            # (It closes the connection: replies may be left unread.)
            error = failed_read(connection, exc)
            reconnect_if_told(connection)
            if error is exc:
                raise
            raise error from exc
        if pushed or getattr(connection, "_should_reconnect", False):
            # A server's maintenance notice (redis-py 6+, RESP3), on this
            # connection (a push among the replies) or on another of the pool,
            # which marks this one. Read as redis-py's attribute first: the
            # check itself costs 2 calls, on every decision.
            reconnect_if_told(connection)
        return replies

    def _rest(self, sock: Any, parser: Any, reply: Any, count: int) -> tuple[list[Any], bool]:
        """Read on until ``count`` replies are in, ``reply`` the first read's first (or
        ``NOT_ENOUGH_DATA``); return them, and whether push messages came among them
        (RESP3: given to redis-py's handlers, not replies).

        :raises redis.exceptions.ConnectionError: the server closed the connection.
        """
        reader = parser._reader
        buffer = parser._buffer
        push = parser._hiredis_PushNotificationType
        replies: list[Any] = []
        pushed = False
        while True:
            while reply is not NOT_ENOUGH_DATA:
                if push is not None and isinstance(reply, push):  # not a reply
                    parser.handle_push_response(reply)
                    pushed = True
                else:
                    replies.append(reply)
                    if len(replies) == count:
                        return replies, pushed
                reply = reader.gets()
            read = sock.recv_into(buffer)
            if not read:
                raise RedisConnectionError("Connection closed by server.")
            reader.feed(buffer, 0, read)
            reply = reader.gets()


def read_replies(connection: Any, count: int) -> list[Any]:
    """Read ``count`` replies from ``connection``; an error reply is returned in its place.

    What ``count`` calls of redis-py's ``Connection.read_response`` do, errors
    and all (no answer: the connection is closed, ``ConnectionError`` or
    ``TimeoutError`` naming the server; an error reply that means the server
    cannot serve, such as ``LOADING``: closed and raised), in one ``try``: the
    replies of a transaction come in one read, and its per-call work (the
    server's name formatted for an error message that is not raised, the
    protocol's test) was a tenth of a decision's client time. RESP3, whose
    push messages redis-py's reader handles, takes redis-py's way.
    """
    if connection.protocol in (3, "3"):
        return [_read_one(connection) for _ in range(count)]
    parser = connection._parser
    try:
        replies = [parser.read_response() for _ in range(count)]
    except BaseException as exc:
        error = failed_read(connection, exc)
        if error is exc:
            raise
        raise error from exc
    if connection.health_check_interval:
        connection.next_health_check = time.monotonic() + connection.health_check_interval
    return replies


def _read_one(connection: Any) -> Any:
    try:
        return connection.read_response()
    except redis_exceptions.ResponseError as exc:
        return exc


def failed_read(connection: Any, exc: BaseException) -> BaseException:
    """Close ``connection`` after a read that failed with ``exc``; return what to raise.

    redis-py's errors for a read (``Connection.read_response``): a socket
    timeout is its ``TimeoutError``, another ``OSError`` its
    ``ConnectionError``, both naming the server; anything else as it is.
    Replies may be left unread: the connection cannot be reused as is.
    """
    connection.disconnect()
    if isinstance(exc, TimeoutError):  # socket.timeout
        return RedisTimeoutError(f"Timeout reading from {connection._host_error()}")
    if isinstance(exc, OSError):
        return RedisConnectionError(
            f"Error while reading from {connection._host_error()} : {exc.args}"
        )
    return exc


def reconnect_if_told(connection: Any) -> None:
    """Reconnect a connection a server's maintenance notice told to (redis-py 6+), as redis-py does.

    Called after every command of redis-py's way on the short path (a
    ``finally``: a context manager would cost a decision 0.7 µs).
    """
    should_reconnect = getattr(connection, "should_reconnect", None)
    if should_reconnect is not None and should_reconnect():
        connection.disconnect()
        connection.connect()


def abandon_async_pool(pool: Any) -> None:
    """Close the sockets of a ``redis.asyncio`` pool whose event loop is closed or gone.

    Its connections' streams cannot be closed the usual way (that schedules
    a callback on the loop): each transport is aborted as far as a closed
    loop allows, its socket (asyncio's ``_sock``) closed directly, and the
    connection forgets its streams (``_reader``, ``_writer``).
    The pool's lists of connections are its ``_available_connections`` and
    ``_in_use_connections``.
    """
    connections = [
        *getattr(pool, "_available_connections", ()),
        *getattr(pool, "_in_use_connections", ()),
    ]
    for connection in connections:
        writer = getattr(connection, "_writer", None)
        if writer is None:
            continue
        # Marked closing (its finalizers then have nothing to warn about); a
        # closed loop refuses the connection-lost callback it schedules.
        abandon_transport(writer.transport)
        connection._reader = connection._writer = None


def reply_reader() -> Any:
    """Return a hiredis reader that reads replies as redis-py's hiredis parser does.

    Error replies become redis-py's exceptions (its hiredis parser's ``parse_error``:
    ``NoScriptError``, ``MovedError``, ...), returned in place, not raised.

    :raises ImportError: without hiredis (``aio_pipe.pipe_possible`` says no then).
    """
    import hiredis
    from redis._parsers.hiredis import _HiredisParser
    from redis.exceptions import InvalidResponse

    # (Bound to a parser: ``parse_error`` is a classmethod in newer redis-py only.)
    parse_error = _HiredisParser(65536).parse_error  # type: ignore[no-untyped-call]
    return hiredis.Reader(protocolError=InvalidResponse, replyError=parse_error)


def abandon_transport(transport: Any) -> None:
    """Close an asyncio transport whose event loop is closed or gone (see above)."""
    with contextlib.suppress(RuntimeError):
        transport.abort()
    sock = getattr(transport, "_sock", None)
    if sock is not None:
        sock.close()
        transport._sock = None
