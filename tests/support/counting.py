"""redis-py connections that count what they write to their sockets.

Used to prove a decision is one round trip: the real socket still does the
work; the wrapper only counts ``sendall`` calls. ``CountingConnection.sends``
counts the sends of both kinds of connection: plain, and Sentinel-managed.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import redis
from redis.sentinel import SentinelManagedConnection


class CountingSocket:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def sendall(self, data: Any, *args: Any) -> None:
        CountingConnection.count_send()
        self._sock.sendall(data, *args)

    def send(self, data: Any, *args: Any) -> int:
        CountingConnection.count_send()
        return self._sock.send(data, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class CountingConnection(redis.Connection):
    sends = 0
    _lock = threading.Lock()

    @classmethod
    def count_send(cls) -> None:
        with cls._lock:
            cls.sends += 1

    def _connect(self) -> Any:
        return CountingSocket(super()._connect())


class CountingSSLConnection(redis.SSLConnection):
    """A TLS connection, counted like :class:`CountingConnection`."""

    def _connect(self) -> Any:
        return CountingSocket(super()._connect())


class CountingSentinelConnection(SentinelManagedConnection):
    """A connection to the primary Sentinel names, counted like :class:`CountingConnection`."""

    def _connect(self) -> Any:
        return CountingSocket(super()._connect())
