"""A redis-py client that keeps one connection of a pool for the threads that use it.

Usually one thread: each thread that decides keeps a connection of its own.
When the pool is full, threads beyond it share the kept connections (see
``RedisNode.client``): every exchange on a kept connection (a write and the
reads of its replies) takes the client's lock, so threads take turns on it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from django_rl.backends.redis_py import (
    MAX_CONNECTIONS,
    SocketPath,
    direct_possible,
    read_replies,
    reconnect_if_told,
    socket_path_possible,
)
from django_rl.backends.resp import ASKING, EXEC, MULTI, Transaction, command

#: What :meth:`KeptConnectionClient.send_encoded` returns when it sent nothing.
NOT_SENT: Any = object()

A = TypeVar("A")
B = TypeVar("B")
T = TypeVar("T")

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


def pool_full(exc: BaseException) -> bool:
    """Return whether ``exc`` is redis-py's error for a pool with no connection to give."""
    return isinstance(exc, MAX_CONNECTIONS) or (
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
    #: Whether an encoded command goes straight to the socket (``redis_py.SocketPath``).
    _on_socket: bool | None = None
    #: The exchange of encoded commands (:meth:`_learn_exchange`), learned on first use.
    _encoded_exchange: Callable[[bytes, int], list[Any]] | None = None

    #: Threads that took this client as theirs (``RedisNode.client``); the
    #: last to let go of it closes it. Counted under the node's lock.
    holders = 1
    #: The node's generation when this client was made (``RedisNode.client``).
    generation = 0

    #: Set when its generation is over (``RedisNode``): its connection is
    #: closed before it goes back to the pool (:meth:`close`), whichever
    #: thread lets go of the client last, or its garbage collection.
    suspect = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not hasattr(self, "single_connection_lock"):
            # redis-py 5.0 has no such lock: every exchange here takes it all the same.
            self.single_connection_lock = threading.RLock()

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

    def _retried(self, exchange: Callable[[A, B], T], first: A, second: B) -> T:
        """Return ``exchange(first, second)``, run under the client's lock; once more if need be.

        Every exchange on the kept connection goes through here: the lock
        (free for its owner; a thread sharing the client waits its turn,
        :meth:`wait_turn`), and the one resend: a ``ConnectionError`` on a
        connection that has worked before (the server closed it: a restart,
        a failover, ``CLIENT KILL``) runs ``exchange`` once more, on a new
        connection, after telling the node (:attr:`on_reconnect`: the server
        may be another one now). ``exchange`` closes the connection when it
        fails, and connects one when it has none. (Two positional arguments,
        not ``*args``: this runs on every decision, and packing them costs more.)
        """
        lock = self.single_connection_lock
        if not lock.acquire(False):
            self.wait_turn()
        try:
            try:
                result = exchange(first, second)
            except RedisConnectionError:
                if not self._worked:
                    raise
                self._worked = False
                if self.on_reconnect is not None:
                    self.on_reconnect()
                result = exchange(first, second)
            self._worked = True
            return result
        finally:
            lock.release()

    def execute_command(self, *args: Any, **options: Any) -> Any:
        return self._retried(self._command, args, options)

    def _command(self, args: tuple[Any, ...], options: dict[str, Any]) -> Any:
        if self.asking:
            return self._exchange([(args, options)], True)[0].unwrap()
        if self._direct_ok or self.direct_ready():  # (learned: no frame; not asking, above)
            return self._direct(args, options)
        return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]

    def _direct(self, args: tuple[Any, ...], options: dict[str, Any]) -> Any:
        """Send one command on the kept connection and parse its reply: redis-py's own
        ``execute_command`` for a connection that never retries, without its steps for
        what this client never is (pooled: a checkout; retried: a closure per call;
        observed by redis-py's OpenTelemetry: a look-up per call).

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
            # transaction's are (see read_replies).
            (reply,) = read_replies(connection, 1)
            if isinstance(reply, ResponseError):
                raise reply
            callbacks: Any = self.response_callbacks
            callback = callbacks.get(args[0])
            return reply if callback is None else callback(reply)
        except _RETRIED_ERRORS:
            connection.disconnect()
            raise
        finally:
            reconnect_if_told(connection)

    def direct_ready(self) -> bool:
        """Return whether a command may be sent encoded already (:meth:`send_encoded`).

        Where redis-py would add nothing to it (``redis_py.direct_possible``),
        learned once; never while following ``ASK`` (:attr:`asking`).
        """
        direct = self._direct_ok
        if direct is None:
            direct = self._direct_ok = direct_possible(self.connection)
        return direct and not self.asking

    def send_encoded(self, encoded: bytes) -> Any:
        """Send one command already encoded in RESP; return its reply as read (no callback).

        For a caller that encodes the unchanging part of a command once (see
        ``scripts.EncodedScript``). :data:`NOT_SENT`, and nothing sent, where
        :meth:`direct_ready` is false (the caller takes redis-py's way). An
        error reply is returned in its place, not raised. As
        :meth:`execute_command`, a connection that had worked and broke is
        replaced and the command sent once more.
        """
        # direct_ready, its usual answer inline (one frame fewer per decision).
        if not (self._direct_ok and not self.asking) and not self.direct_ready():
            return NOT_SENT
        exchange = self._encoded_exchange or self._learn_exchange()
        return self._retried(exchange, encoded, 1)[0]

    def transaction_encoded(self, encoded: bytes, count: int) -> list[Any]:
        """Run a MULTI/EXEC already encoded in RESP (``count`` commands); return their replies.

        ``encoded`` is ``MULTI``, the ``count`` commands and ``EXEC``, as
        :meth:`transaction_replies` would send them. Only when
        :meth:`direct_ready`. Replies, errors and the one resend on a new
        connection as :meth:`transaction_replies`.
        """
        exchange = self._encoded_exchange or self._learn_exchange()
        replies = self._retried(exchange, encoded, count + 2)
        return _transaction_result(replies, asking=False)

    def run_transaction(
        self, transaction: Transaction, key: str, values: tuple[Any, ...]
    ) -> list[Any]:
        """Run ``transaction``'s commands, ``key`` and ``values`` in its slots; return the replies.

        Replies and errors as :meth:`transaction_replies`. Encoded by the
        transaction itself (its fixed bytes made once) where
        :meth:`direct_ready`; otherwise (``ASKING``, a connection redis-py must
        handle) redis-py's way, the same commands.
        """
        if self.direct_ready():
            encoded = transaction.encode(key, values)
            return self.transaction_encoded(encoded, len(transaction.commands))
        return self.transaction_replies(transaction.filled(key, values))

    def _learn_exchange(self) -> Callable[[bytes, int], list[Any]]:
        """Return (and keep) how encoded commands are exchanged on this client's connection.

        Straight on the socket where redis-py's layout allows
        (``redis_py.SocketPath``: its bound ``exchange``, so that no frame of
        ours stands between the retry helper and the socket); otherwise
        redis-py's send and read (:meth:`_exchange_encoded`). The connection
        is this client's for its life (redis-py reconnects it in place).
        """
        connection: Any = self.connection  # redis-py's Connection is untyped
        self._on_socket = socket_path_possible(connection)
        exchange = SocketPath(connection).exchange if self._on_socket else self._exchange_encoded
        self._encoded_exchange = exchange
        return exchange

    def _exchange_encoded(self, encoded: bytes, count: int) -> list[Any]:
        """Send ``encoded`` redis-py's way; return its ``count`` replies, error replies in place.

        redis-py's send (which connects) then its parser; the connection is
        closed when either fails. The caller holds the client's lock.
        """
        connection: Any = self.connection  # redis-py's Connection is untyped
        try:
            connection.send_packed_command([encoded])
            return read_replies(connection, count)
        except _RETRIED_ERRORS:
            connection.disconnect()
            raise
        finally:
            reconnect_if_told(connection)

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
        return [reply.value for reply in self._retried(self._exchange, commands, self.asking)]

    def _exchange(self, commands: Sequence[Command], asking: bool) -> list[_Reply]:
        # redis-py's Connection is untyped; Any keeps mypy --strict quiet about it.
        connection: Any = self.connection
        assert connection is not None, "a kept-connection client always holds one"
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
        return self._retried(self._run_transaction, commands, self.asking)

    def _run_transaction(self, commands: Sequence[Sequence[Any]], asking: bool) -> list[Any]:
        # redis-py's Connection is untyped; Any keeps mypy --strict quiet about it.
        connection: Any = self.connection
        assert connection is not None, "a kept-connection client always holds one"
        # One ASKING before MULTI (``asking``: following ASK): the node checks
        # the transaction's keys at EXEC, and the flag lasts until the
        # transaction ends. MULTI, EXEC and ASKING are encoded once per
        # process; only the commands are here.
        parts = [ASKING, MULTI] if asking else [MULTI]
        parts += _encode_all(connection, commands, here=self.direct_ready())
        parts.append(EXEC)
        # (The caller holds the client's lock.)
        try:
            connection.send_packed_command([b"".join(parts)])
            # (+OK for ASKING), +OK for MULTI, +QUEUED for each command, then
            # EXEC's array. An error reply (a command refused when queued:
            # OOM, NOPERM, wrong arguments; then EXECABORT for EXEC) is read
            # like any other, so the connection is left with nothing unread
            # and stays usable.
            read = read_replies(connection, len(commands) + 2 + asking)
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


def _encode_all(connection: Any, commands: Sequence[Sequence[Any]], *, here: bool) -> list[bytes]:
    """Return ``commands`` in RESP: encoded here (``resp.py``) if ``here``, else by redis-py.

    redis-py's packer costs more than the rest of a transaction's client
    side; it still takes arguments of other types than str, int and bytes.
    """
    if here:
        try:
            return [command(each) for each in commands]
        except TypeError:
            pass
    parts: list[bytes] = []
    for each in commands:
        parts += connection.pack_command(*each)
    return parts


class _Reply:
    """One reply of :meth:`KeptConnectionClient._exchange`: a value, or an error reply."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def unwrap(self) -> Any:
        if isinstance(self.value, ResponseError):
            raise self.value
        return self.value


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
