"""A redis-py client that keeps one connection of a pool for the thread that uses it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

#: A command as a redis-py pipeline stages it: its arguments and its options.
Command = tuple[tuple[Any, ...], dict[str, Any]]


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
        client of the thread that follows the redirect.
    """

    _worked = False
    asking = False
    #: Called when a connection that had worked is replaced (the server
    #: restarted, perhaps as another version): the node learns it again.
    on_reconnect: Callable[[], None] | None = None

    def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            if self.asking:
                result = self._exchange([(args, options)])[0].unwrap()
            else:
                result = super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        except RedisConnectionError:
            if not self._worked:
                raise
            self._reconnecting()
            if self.asking:
                result = self._exchange([(args, options)])[0].unwrap()
            else:
                result = super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        self._worked = True
        return result

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
        try:
            replies = self._exchange(commands)
        except RedisConnectionError:
            if not self._worked:
                raise
            self._worked = False
            replies = self._exchange(commands)
        self._worked = True
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
        # No lock: a kept-connection client belongs to one thread.
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
        try:
            replies = self._run_transaction(commands)
        except RedisConnectionError:
            if not self._worked:
                raise
            self._reconnecting()
            replies = self._run_transaction(commands)
        self._worked = True
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
        # EXEC, and the flag lasts until the transaction ends.
        asking = [("ASKING",)] if self.asking else []
        packed = connection.pack_commands([*asking, ("MULTI",), *commands, ("EXEC",)])
        # No lock: a kept-connection client belongs to one thread.
        try:
            connection.send_packed_command(packed)
            if asking:
                connection.read_response()
            # +OK for MULTI, +QUEUED for each command, then EXEC's array. An
            # error reply (a command refused when queued: OOM, NOPERM, wrong
            # arguments; then EXECABORT for EXEC) is read like any other, so
            # the connection is left with nothing unread and stays usable.
            error: ResponseError | None = None
            for _ in range(len(commands) + 1):
                error = _read_reply(connection, error)
            replies: list[Any] | None = None
            try:
                replies = connection.read_response()
            except ResponseError as exc:
                error = error or exc
        except BaseException:
            # Replies may be left unread on the socket: it cannot be reused as is.
            connection.disconnect()
            raise
        if error is not None:
            raise error  # the first, which says why (EXECABORT only says that one failed)
        assert replies is not None
        for reply in replies:
            if isinstance(reply, ResponseError):
                raise reply
        return replies


class _Reply:
    """One reply of :meth:`KeptConnectionClient._exchange`: a value, or an error reply."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def unwrap(self) -> Any:
        if isinstance(self.value, ResponseError):
            raise self.value
        return self.value


def _read_reply(connection: Any, error: ResponseError | None) -> ResponseError | None:
    """Read one reply of a transaction; return the first error reply seen so far, if any."""
    try:
        connection.read_response()
    except ResponseError as exc:
        return error or exc
    return error


def discard(client: Redis) -> None:
    """Close a kept connection and hand it back to the pool (closed, so never reused as is)."""
    connection = client.connection
    if connection is not None:
        connection.disconnect()  # type: ignore[no-untyped-call]
    client.close()
