"""A redis-py client that keeps one connection of a pool for the thread that uses it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError


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
    """

    _worked = False
    #: Called when a connection that had worked is replaced (the server
    #: restarted, perhaps as another version): the node learns it again.
    on_reconnect: Callable[[], None] | None = None

    def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            result = super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        except RedisConnectionError:
            if not self._worked:
                raise
            self._reconnecting()
            result = super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        self._worked = True
        return result

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
        packed = connection.pack_commands([("MULTI",), *commands, ("EXEC",)])
        # No lock: a kept-connection client belongs to one thread.
        try:
            connection.send_packed_command(packed)
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
