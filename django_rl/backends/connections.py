"""A redis-py client that keeps one connection of a pool for the threads that use it.

Usually one thread: each thread that decides keeps a connection of its own.
When the pool is full, threads beyond it share the kept connections (see
``RedisNode.client``): every exchange on a kept connection (a write and the
reads of its replies) takes the client's lock, so threads take turns on it.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

from redis import Redis
from redis import exceptions as redis_exceptions
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from django_rl.backends import resp

#: A command as a redis-py pipeline stages it: its arguments and its options.
Command = tuple[tuple[Any, ...], dict[str, Any]]


class PoolExhausted(RedisError):
    """No connection of the pool came free within the socket timeout.

    Raised for a thread that found the pool full and waited that long for a
    turn on a connection (``RedisNode.client``). Not an outage: the server may
    answer every other call. A decision that meets it follows its
    ``fallback_rate`` or ``fail_open``, as for any Redis error; it is logged
    once per incident (kind ``pool``, ``errors.py``).
    """


#: What redis-py raises when its pool is full: ``MaxConnectionsError`` (a
#: ``ConnectionError``; a plain one before redis-py 5.1) from a
#: ``ConnectionPool`` at ``max_connections``, ``ConnectionError`` from a
#: ``BlockingConnectionPool`` that waited its ``timeout`` for one.
_POOL_FULL_MESSAGES = ("Too many connections", "No connection available.")


#: redis-py's class for it, where it has one (``()`` matches nothing).
_MAX_CONNECTIONS: Any = getattr(redis_exceptions, "MaxConnectionsError", ())


def pool_full(exc: BaseException) -> bool:
    """Return whether ``exc`` is redis-py's error for a pool with no connection to give."""
    return isinstance(exc, _MAX_CONNECTIONS) or (
        isinstance(exc, RedisConnectionError) and str(exc) in _POOL_FULL_MESSAGES
    )


class KeptConnectionClient(Redis):
    """A redis-py client on one connection that it keeps (``single_connection_client``).

    A pooled client notices a connection the server has closed (a restart, a
    failover) before it sends, at the price of system calls on every command.
    This one notices when a command fails, so a command that fails with
    ``ConnectionError`` on a connection that has worked before is sent once
    more, on a new connection: a Redis restart costs no decision. (Had the
    first one reached the server before the connection broke, a hit would
    count twice: a denial slightly early, never one allowed too many.) During
    an outage, after that one retry, nothing is sent twice.

    :ivar asking: while true, every command, transaction and pipelined
        command is preceded by ``ASKING``, in the same write: how a Redis
        Cluster client follows an ``ASK`` redirect to the node importing a
        slot, which serves a key of that slot only to the command right after
        an ``ASKING`` (a whole ``MULTI``/``EXEC`` counts as one command, so
        one ``ASKING`` before ``MULTI`` covers it). Its reply is read and
        dropped. Set by the cluster backend, for one operation, on the
        client of the thread that follows the redirect, which holds the
        client's lock meanwhile (``ClusterMember.asking``).

    Thread-safe: each call takes the client's lock (redis-py's
    ``single_connection_lock``, reentrant) for its whole exchange. Its owner
    finds it free (0.1 µs); a thread sharing it (the pool is full) waits for
    its turn up to the connection's socket timeout, then raises
    :class:`PoolExhausted`.
    """

    _worked = False
    asking = False
    #: Called when a connection that had worked is replaced (the server
    #: restarted, perhaps as another version): the node learns it again.
    on_reconnect: Callable[[], None] | None = None
    #: Whether a command takes the short path (:meth:`_direct`); learned on first use.
    _direct_ok: bool | None = None
    #: Whether an encoded command goes straight to the socket (:func:`_exchange_on_socket`).
    _on_socket: bool | None = None

    #: Threads that took this client as theirs (``RedisNode.client``); the
    #: last to let go of it closes it. Counted under the node's lock.
    holders = 1
    #: The node's generation when this client was made (``RedisNode.client``).
    generation = 0

    #: Set when its generation is over (``RedisNode``): its connection is
    #: closed before it goes back to the pool (:meth:`close`), whichever
    #: thread lets go of the client last, or its garbage collection.
    suspect = False

    def close(self) -> None:
        # (getattr: redis-py's __del__ calls close on a client its constructor failed to make.)
        connection: Any = getattr(self, "connection", None)
        if self.suspect and connection is not None:
            connection.disconnect()
        super().close()

    def wait_turn(self) -> None:
        """Take the client's lock, which another thread holds: wait up to the socket timeout.

        :raises PoolExhausted: if the lock is not free by then.
        """
        timeout = getattr(self.connection, "socket_timeout", None)
        if not self.single_connection_lock.acquire(timeout=-1 if timeout is None else timeout):
            raise PoolExhausted(
                f"every connection of the pool was in use for {timeout:g} s (the socket timeout)"
            )

    def execute_command(self, *args: Any, **options: Any) -> Any:
        lock = self.single_connection_lock
        if not lock.acquire(False):
            self.wait_turn()
        try:
            try:
                result = self._command(args, options)
            except RedisConnectionError:
                if not self._worked:
                    raise
                self._reconnecting()
                result = self._command(args, options)
            self._worked = True
            return result
        finally:
            lock.release()

    def _command(self, args: tuple[Any, ...], options: dict[str, Any]) -> Any:
        if self.asking:
            return self._exchange([(args, options)])[0].unwrap()
        direct = self._direct_ok
        if direct is None:
            direct = self._direct_ok = _direct_possible(self.connection)
        if direct:
            return self._direct(args, options)
        return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]

    def _direct(self, args: tuple[Any, ...], options: dict[str, Any]) -> Any:
        """Send one command on the kept connection and parse its reply: redis-py's own
        ``execute_command`` for a connection that never retries, without its steps for
        what this client never is (pooled: a checkout; retried: a closure per call;
        observed by redis-py's OpenTelemetry: a look-up per call). Its lock
        (shared by threads) is :meth:`execute_command`'s.

        As redis-py does: an error redis-py's retry would handle (no answer, a
        timeout) closes the connection before it is raised; a connection told
        to reconnect (a server's maintenance notice) reconnects afterwards.
        """
        # redis-py's Connection is untyped; Any keeps mypy --strict quiet about it.
        connection: Any = self.connection
        try:
            connection.send_packed_command(connection.pack_command(*args))
            if options:
                return self.parse_response(connection, args[0], **options)  # type: ignore[no-untyped-call]
            # What parse_response does without options, the reply read as a
            # transaction's are (see _read_replies).
            (reply,) = _read_replies(connection, 1)
            if isinstance(reply, ResponseError):
                raise reply
            callbacks: Any = self.response_callbacks
            callback = callbacks.get(args[0])
            return reply if callback is None else callback(reply)
        except _RETRIED_ERRORS:
            connection.disconnect()
            raise
        finally:
            _reconnect_if_told(connection)

    def direct_ready(self) -> bool:
        """Return whether a command may be sent encoded already (:meth:`send_encoded`)."""
        direct = self._direct_ok
        if direct is None:
            direct = self._direct_ok = _direct_possible(self.connection)
        return direct and not self.asking

    def send_encoded(self, encoded: bytes) -> Any:
        """Send one command already encoded in RESP; return its reply as read (no callback).

        For a caller that encodes the unchanging part of a command once (see
        ``scripts.EncodedScript``). Only when :meth:`direct_ready`. An error
        reply is returned in its place, not raised. As :meth:`execute_command`,
        a connection that had worked and broke is replaced and the command sent
        once more.
        """
        lock = self.single_connection_lock
        if not lock.acquire(False):
            self.wait_turn()
        try:
            # _exchange_encoded for one reply, inline: this runs on every decision.
            connection: Any = self.connection  # redis-py's Connection is untyped
            sockets = self._on_socket
            if sockets is None:
                sockets = self._on_socket = _socket_path_possible(connection)
            if sockets:
                sock, reader = connection._sock, connection._parser._reader
                if sock is not None and reader is not None:  # connected
                    try:
                        reply = _exchange_on_socket(connection, sock, reader, encoded)
                    except RedisConnectionError:
                        _reconnect_if_told(connection)
                        if not self._worked:
                            raise
                        self._reconnecting()
                        reply = self._send_encoded(encoded, 1)[0]
                    except BaseException:
                        _reconnect_if_told(connection)
                        raise
                    self._worked = True
                    return reply
            return self._exchange_encoded(encoded, 1)[0]
        finally:
            lock.release()

    def transaction_encoded(self, encoded: bytes, count: int) -> list[Any]:
        """Run a MULTI/EXEC already encoded in RESP (``count`` commands); return their replies.

        ``encoded`` is ``MULTI``, the ``count`` commands and ``EXEC``, as
        :meth:`transaction_replies` would send them (for a caller that
        encodes a transaction's unchanging parts once, ``fixed_window.py``).
        Only when :meth:`direct_ready`. Replies, errors and the one resend on a
        new connection as :meth:`transaction_replies`.
        """
        lock = self.single_connection_lock
        if not lock.acquire(False):
            self.wait_turn()
        try:
            replies = self._exchange_encoded(encoded, count + 2)
        finally:
            lock.release()
        return _transaction_result(replies, asking=False)

    def _exchange_encoded(self, encoded: bytes, count: int) -> list[Any]:
        """Send ``encoded``; return its ``count`` replies as read, error replies in place.

        The caller holds the client's lock.
        """
        connection: Any = self.connection  # redis-py's Connection is untyped
        sockets = self._on_socket
        if sockets is None:
            sockets = self._on_socket = _socket_path_possible(connection)
        if sockets:
            sock, reader = connection._sock, connection._parser._reader
            if sock is not None and reader is not None:  # connected
                # (It closes the connection on an error, as redis-py's way
                # does, and acts on a maintenance notice that came with the reply.)
                try:
                    replies = _exchange_many_on_socket(connection, sock, reader, encoded, count)
                except RedisConnectionError:
                    _reconnect_if_told(connection)
                    if not self._worked:
                        raise
                    self._reconnecting()
                    # Once more, on a new connection (redis-py's way connects it).
                    replies = self._send_encoded(encoded, count)
                except BaseException:
                    _reconnect_if_told(connection)
                    raise
                self._worked = True
                return replies
        try:
            replies = self._send_encoded(encoded, count)
        except RedisConnectionError:
            if not self._worked:
                raise
            self._reconnecting()
            replies = self._send_encoded(encoded, count)
        self._worked = True
        return replies

    def _send_encoded(self, encoded: bytes, count: int) -> list[Any]:
        # redis-py's way: its send, then its parser (a connection not yet
        # connected, or one the socket path does not fit).
        connection: Any = self.connection  # redis-py's Connection is untyped
        try:
            connection.send_packed_command([encoded])
            return _read_replies(connection, count)
        except _RETRIED_ERRORS:
            connection.disconnect()
            raise
        finally:
            _reconnect_if_told(connection)

    def command_replies(self, commands: Sequence[Command]) -> list[Any]:
        """Send ``commands`` in one write (no ``MULTI``); return their replies, errors included.

        A pipeline on the kept connection: one write, one read, without a
        checkout from the pool. Each reply is what redis-py's pipeline would
        return (its response callbacks applied), or the ``ResponseError``
        the server answered to that command, in its place: the caller decides
        what an error means (a cluster member follows ``ASK`` per command).
        A ``ConnectionError`` on a connection that has worked before is sent
        once more, on a new connection, as in :meth:`execute_command`.

        :raises redis.exceptions.RedisError: if Redis cannot answer (no reply).
        """
        lock = self.single_connection_lock
        if not lock.acquire(False):
            self.wait_turn()
        try:
            try:
                replies = self._exchange(commands)
            except RedisConnectionError:
                if not self._worked:
                    raise
                self._reconnecting()
                replies = self._exchange(commands)
            self._worked = True
        finally:
            lock.release()
        return [reply.value for reply in replies]

    def _exchange(self, commands: Sequence[Command]) -> list[_Reply]:
        # redis-py's Connection is untyped; Any keeps mypy --strict quiet about it.
        connection: Any = self.connection
        assert connection is not None, "a kept-connection client always holds one"
        asking = self.asking
        wire: list[tuple[Any, ...]] = []
        for args, _ in commands:
            if asking:
                wire.append(("ASKING",))
            wire.append(args)
        # (The caller holds the client's lock.)
        try:
            connection.send_packed_command(connection.pack_commands(wire))
            replies = []
            for args, options in commands:
                if asking:
                    connection.read_response()  # +OK (an error reply raises: not a cluster)
                try:
                    reply = self.parse_response(connection, args[0], **options)  # type: ignore[no-untyped-call]
                    replies.append(_Reply(reply))
                except ResponseError as exc:
                    replies.append(_Reply(exc))
        except BaseException:
            # Replies may be left unread on the socket: it cannot be reused as is.
            connection.disconnect()
            raise
        return replies

    def transaction_replies(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Run ``commands`` in one MULTI/EXEC on the kept connection; return their replies.

        One write and one read, as a redis-py transaction pipeline, but
        without its checkout of a connection from the pool (which costs more
        client time than the round trip's own work). A ``ConnectionError`` on
        a connection that has worked before is sent once more, on a new
        connection, as in :meth:`execute_command`.

        :raises redis.exceptions.RedisError: if Redis cannot answer, or any
            command fails (the first error reply is raised; every reply is
            read all the same, so the connection stays usable).
        """
        lock = self.single_connection_lock
        if not lock.acquire(False):
            self.wait_turn()
        try:
            try:
                replies = self._run_transaction(commands)
            except RedisConnectionError:
                if not self._worked:
                    raise
                self._reconnecting()
                replies = self._run_transaction(commands)
            self._worked = True
        finally:
            lock.release()
        return replies

    def _reconnecting(self) -> None:
        self._worked = False
        if self.on_reconnect is not None:
            self.on_reconnect()

    def _run_transaction(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        # redis-py's Connection is untyped; Any keeps mypy --strict quiet about it.
        connection: Any = self.connection
        assert connection is not None, "a kept-connection client always holds one"
        # One ASKING before MULTI: the node checks the transaction's keys at
        # EXEC, and the flag lasts until the transaction ends. MULTI, EXEC
        # and ASKING are packed once per process; only the commands are here.
        asking = self.asking
        parts = [_ASKING, _MULTI] if asking else [_MULTI]
        parts += _encode_all(connection, commands, here=self.direct_ready())
        parts.append(_EXEC)
        # (The caller holds the client's lock.)
        try:
            connection.send_packed_command([b"".join(parts)])
            # (+OK for ASKING), +OK for MULTI, +QUEUED for each command, then
            # EXEC's array. An error reply (a command refused when queued:
            # OOM, NOPERM, wrong arguments; then EXECABORT for EXEC) is read
            # like any other, so the connection is left with nothing unread
            # and stays usable.
            read = _read_replies(connection, len(commands) + 2 + asking)
            if asking and isinstance(read[0], ResponseError):
                raise read[0]  # not a cluster
        except BaseException:
            # Replies may be left unread on the socket: it cannot be reused as is.
            connection.disconnect()
            raise
        return _transaction_result(read, asking=asking)


def _transaction_result(read: list[Any], *, asking: bool) -> list[Any]:
    """Return EXEC's replies from every reply of a transaction (``read``), or raise its error.

    ``read``: ASKING's +OK if ``asking``, MULTI's +OK, a +QUEUED per command
    (or the error a command was refused with when queued), then EXEC's array
    (or EXECABORT). The first error reply is raised: it says why
    (EXECABORT only says that one failed); then an error inside EXEC's array.
    """
    for reply in read[asking:]:
        if isinstance(reply, ResponseError):
            raise reply
    replies: list[Any] = read[-1]
    for reply in replies:
        if isinstance(reply, ResponseError):
            raise reply
    return replies


#: Errors redis-py's retry would handle (no answer, a timeout; socket.timeout
#: too): on the short path, as in redis-py, the connection is closed first.
_RETRIED_ERRORS = (RedisConnectionError, RedisTimeoutError, TimeoutError)


def _reconnect_if_told(connection: Any) -> None:
    """Reconnect a connection a server's maintenance notice told to (redis-py 6+), as redis-py does.

    Called after every command of the short path (a ``finally``: a context
    manager would cost a decision 0.7 µs).
    """
    should_reconnect = getattr(connection, "should_reconnect", None)
    if should_reconnect is not None and should_reconnect():
        connection.disconnect()
        connection.connect()


def _encode_all(connection: Any, commands: Sequence[Sequence[Any]], *, here: bool) -> list[bytes]:
    """Return ``commands`` in RESP: encoded here (``resp.py``) if ``here``, else by redis-py.

    redis-py's packer costs more than the rest of a transaction's client
    side; it still takes arguments of other types than str, int and bytes.
    """
    if here:
        try:
            return [resp.command(command) for command in commands]
        except TypeError:
            pass
    parts: list[bytes] = []
    for command in commands:
        parts += connection.pack_command(*command)
    return parts


#: Commands without arguments, packed once (RESP, as every redis-py packer writes them).
_MULTI = b"*1\r\n$5\r\nMULTI\r\n"
_EXEC = b"*1\r\n$4\r\nEXEC\r\n"
_ASKING = b"*1\r\n$6\r\nASKING\r\n"


def _read_replies(connection: Any, count: int) -> list[Any]:
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
        error = _failed_read(connection, exc)
        if error is exc:
            raise
        raise error from exc
    if connection.health_check_interval:
        connection.next_health_check = time.monotonic() + connection.health_check_interval
    return replies


def _failed_read(connection: Any, exc: BaseException) -> BaseException:
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


def _socket_path_possible(connection: Any) -> bool:
    """Return whether :func:`_exchange_on_socket` may stand in for redis-py's send and read.

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
        and _NOT_ENOUGH_DATA is getattr(parsers, "NOT_ENOUGH_DATA", None)
        and not connection.health_check_interval
        and hasattr(parser, "_reader")
        and hasattr(parser, "_buffer")
        and hasattr(connection, "_sock")
    )


try:
    from redis._parsers.hiredis import NOT_ENOUGH_DATA as _NOT_ENOUGH_DATA
except ImportError:  # an older redis-py: the socket path is never taken
    _NOT_ENOUGH_DATA = object()


def _exchange_on_socket(connection: Any, sock: Any, reader: Any, encoded: bytes) -> Any:
    """Send ``encoded`` on ``connection``'s socket, return its reply as hiredis parses it.

    What redis-py's ``send_packed_command`` then its parser's
    ``read_response`` do for a connected hiredis connection without health
    checks (see :func:`_socket_path_possible`), errors and all: a failed
    write or read closes the connection and raises redis-py's
    ``TimeoutError`` or ``ConnectionError``; an error reply is returned, not
    raised, except one that means the server cannot serve (``LOADING``: a
    ``ConnectionError``), raised as redis-py raises it; RESP3 push messages
    before the reply go to redis-py's handlers. Without redis-py's layers
    between the two system calls, which cost a decision several µs of CPU
    around a round trip (docs/performance.md). (:func:`_exchange_many_on_socket`
    for several replies; this one, for one, stays the shortest path.)
    """
    try:
        _write(sock, encoded)
    except BaseException as exc:
        error = _failed_write(connection, exc)
        if error is exc:
            raise
        raise error from None
    parser = connection._parser
    pushed = False
    try:
        # redis-py before 8 may hold a reply its can_read() read ahead.
        if getattr(parser, "_next_response", _NOT_ENOUGH_DATA) is not _NOT_ENOUGH_DATA:
            reply = parser.read_response()
        else:
            reply = reader.gets()
            buffer = parser._buffer
            while reply is _NOT_ENOUGH_DATA:
                read = sock.recv_into(buffer)
                if not read:
                    raise RedisConnectionError("Connection closed by server.")
                reader.feed(buffer, 0, read)
                reply = reader.gets()
            push = getattr(parser, "_hiredis_PushNotificationType", None)
            if push is not None and isinstance(reply, push):  # RESP3, before the reply
                parser.handle_push_response(reply)
                reply = parser.read_response()  # the reply, after any more of them
                pushed = True
    except BaseException as exc:
        error = _failed_read(connection, exc)
        if error is exc:
            raise
        raise error from exc
    if isinstance(reply, RedisConnectionError):  # LOADING and the like, as redis-py raises them
        connection.disconnect()
        raise reply
    if pushed or getattr(connection, "_should_reconnect", False):
        # A server's maintenance notice (redis-py 6+, RESP3), on this
        # connection (a push before the reply) or on another of the pool,
        # which marks this one. Read as redis-py's attribute first: the
        # check itself costs 2 calls, on every decision.
        _reconnect_if_told(connection)
    return reply


def _exchange_many_on_socket(
    connection: Any, sock: Any, reader: Any, encoded: bytes, count: int
) -> list[Any]:
    """As :func:`_exchange_on_socket`, for ``count`` replies (a transaction's); return them.

    Each reply as redis-py's parser's ``read_response`` gives it: an error
    reply in its place, one that means the server cannot serve raised
    (alone, or first in an array, as EXEC's), push messages among them
    handled by redis-py's handlers.
    """
    try:
        _write(sock, encoded)
    except BaseException as exc:
        error = _failed_write(connection, exc)
        if error is exc:
            raise
        raise error from None
    parser = connection._parser
    pushed = False
    replies: list[Any] = []
    try:
        if getattr(parser, "_next_response", _NOT_ENOUGH_DATA) is not _NOT_ENOUGH_DATA:
            replies = [parser.read_response() for _ in range(count)]  # (redis-py before 8)
        else:
            buffer = parser._buffer
            push = getattr(parser, "_hiredis_PushNotificationType", None)
            while len(replies) < count:
                reply = reader.gets()
                while reply is _NOT_ENOUGH_DATA:
                    read = sock.recv_into(buffer)
                    if not read:
                        raise RedisConnectionError("Connection closed by server.")
                    reader.feed(buffer, 0, read)
                    reply = reader.gets()
                if push is not None and isinstance(reply, push):  # RESP3: not a reply
                    parser.handle_push_response(reply)
                    pushed = True
                    continue
                if isinstance(reply, RedisConnectionError):
                    raise reply  # LOADING and the like
                if type(reply) is list and reply and isinstance(reply[0], RedisConnectionError):
                    raise reply[0]
                replies.append(reply)
    except BaseException as exc:
        error = _failed_read(connection, exc)  # (it closes the connection)
        if error is exc:
            raise
        raise error from exc
    if pushed or getattr(connection, "_should_reconnect", False):
        _reconnect_if_told(connection)  # see _exchange_on_socket
    return replies


#: Whether a plain socket's file descriptor may be written with ``os.write``.
_WRITE_FD = os.name == "posix"


def _write(sock: Any, encoded: bytes) -> None:
    """Write ``encoded`` on ``sock``, as ``sock.sendall(encoded)`` does, in one system call.

    A socket with a timeout (django-redis' ``SOCKET_TIMEOUT``) makes CPython
    ``poll`` before every ``send``: two system calls for a write the kernel
    takes at once whenever the socket's buffer has room, as it has for a
    decision's few hundred bytes on a connection whose replies were all read.
    So a plain socket (not TLS: ``ssl.SSLSocket`` is a subclass and keeps
    ``sendall``) is written with ``os.write`` on its descriptor, which that
    timeout leaves non-blocking: all of it at once, the usual case, or what
    the kernel took, and the rest by ``sendall``, which waits for room as
    long as the timeout allows and raises ``TimeoutError`` after it. Errors
    are the ``OSError`` s ``sendall`` would raise (a broken pipe, a reset).
    One ``poll`` saved per round trip: 0.5-1 µs of CPU in a tight loop here,
    within the noise around a decision (docs/performance.md).
    """
    if _WRITE_FD and type(sock) is socket.socket:
        try:
            written = os.write(sock.fileno(), encoded)
        except BlockingIOError:  # no room yet: sendall waits for it
            written = 0
        if written == len(encoded):
            return
        sock.sendall(memoryview(encoded)[written:])
        return
    sock.sendall(encoded)


def _failed_write(connection: Any, exc: BaseException) -> BaseException:
    """Close ``connection`` after a write that failed with ``exc``; return what to raise.

    redis-py's errors for a write (``Connection.send_packed_command``): a
    socket timeout is its ``TimeoutError``, another ``OSError`` its
    ``ConnectionError``; anything else as it is.
    """
    connection.disconnect()
    if isinstance(exc, TimeoutError):  # socket.timeout
        return RedisTimeoutError("Timeout writing to socket")
    if isinstance(exc, OSError):
        errno, message = ("UNKNOWN", exc.args[0]) if len(exc.args) == 1 else exc.args[:2]
        return RedisConnectionError(f"Error {errno} while writing to socket. {message}.")
    return exc


def _read_one(connection: Any) -> Any:
    try:
        return connection.read_response()
    except ResponseError as exc:
        return exc


class _Reply:
    """One reply of :meth:`KeptConnectionClient._exchange`: a value, or an error reply."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def unwrap(self) -> Any:
        if isinstance(self.value, ResponseError):
            raise self.value
        return self.value


def _direct_possible(connection: Any) -> bool:
    """Return whether commands on ``connection`` may skip redis-py's ``execute_command``.

    Only where it would do nothing more: a connection that encodes text as
    UTF-8 (redis-py's default; the short path encodes it so, ``resp.py``), never retries
    (django-redis' default; decisions must not be sent twice by redis-py),
    and redis-py's OpenTelemetry metrics off (redis-py 7 looks them up on
    every command; a client made after they are turned on goes redis-py's
    way, so it records django_rl's commands too).
    """
    encoding = getattr(getattr(connection, "encoder", None), "encoding", "utf-8")
    if str(encoding).lower().replace("_", "-") not in ("utf-8", "utf8"):
        return False  # resp.py encodes text as UTF-8, as redis-py does by default
    retry = getattr(connection, "retry", None)
    get_retries = getattr(retry, "get_retries", None)  # redis-py 5.0 has only _retries
    retries = get_retries() if get_retries is not None else getattr(retry, "_retries", None)
    if retries != 0:
        return False
    try:
        from redis.observability import recorder
    except ImportError:  # redis-py before 7: no such metrics
        return True
    try:
        return recorder._get_or_create_collector() is None
    except Exception:  # a change of redis-py's internals: take its own way
        return False


def direct_client(client: Redis) -> KeptConnectionClient | None:
    """Return ``client`` if it takes commands encoded already (``send_encoded``), else ``None``."""
    if type(client) is KeptConnectionClient and client.direct_ready():
        return client
    return None


def discard(client: Redis) -> None:
    """Close a kept connection and hand it back to the pool (closed, so never reused as is)."""
    connection = client.connection
    if connection is not None:
        connection.disconnect()  # type: ignore[no-untyped-call]
    client.close()
