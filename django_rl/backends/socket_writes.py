"""Writing a command on a socket: in one system call, with redis-py's errors."""

from __future__ import annotations

import os
import socket
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

#: The socket type whose file descriptor may be written with ``os.write``: a
#: plain socket, on POSIX (``None`` elsewhere: every socket takes ``sendall``).
_WRITTEN_BY_FD: Any = socket.socket if os.name == "posix" else None


def write(sock: Any, encoded: bytes) -> None:
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
    if type(sock) is _WRITTEN_BY_FD:
        try:
            written = os.write(sock.fileno(), encoded)
        except BlockingIOError:  # no room yet: sendall waits for it
            written = 0
        if written == len(encoded):
            return
        sock.sendall(memoryview(encoded)[written:])
        return
    sock.sendall(encoded)


def failed_write(connection: Any, exc: BaseException) -> BaseException:
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
