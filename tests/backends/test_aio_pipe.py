"""The auto-pipelined connection's reading (backends/aio_pipe.py) against a peer that
answers as told: replies split across reads, and a reply nothing asked for."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from django_rl.backends.aio_pipe import open_pipe

T = TypeVar("T")

PING = b"*1\r\n$4\r\nPING\r\n"

#: Each test's whole run: a pipe that never closes its side (a broken
#: out-of-step check) fails the test in seconds, not at the suite's timeout.
LIMIT = 10.0


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, failed with ``TimeoutError`` after :data:`LIMIT` seconds."""
    return asyncio.run(asyncio.wait_for(main, LIMIT))


class _Peer:
    """A TCP server that answers every read with the parts of ``answer``, ``pause`` apart."""

    def __init__(self, answer: list[bytes], pause: float = 0.0) -> None:
        self.answer, self.pause = answer, pause
        self.served: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        await self.server.wait_closed()
        await asyncio.gather(*self.served)  # each ends once the pipe closed its side

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.served.append(asyncio.current_task())  # type: ignore[arg-type]
        try:
            while await reader.read(65536):
                for part in self.answer:
                    writer.write(part)
                    await writer.drain()
                    if self.pause:
                        await asyncio.sleep(self.pause)
        except ConnectionError:
            pass  # the pipe aborted its connection
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


def test_replies_split_across_reads_reach_their_waiters_whole():
    async def main() -> list[object]:
        # A MULTI/EXEC's five replies, cut inside a reply and between them.
        peer = _Peer(
            [b"+OK\r\n+QUEU", b"ED\r\n+QUEUED\r\n", b"*2\r\n:1\r\n", b":2\r\n"], pause=0.02
        )
        async with peer as port:
            pipe = await open_pipe({"host": "127.0.0.1", "port": port, "socket_timeout": 2.0})
            try:
                return await pipe.exchange(PING, 4)
            finally:
                pipe.close()

    assert run(main()) == [b"OK", b"QUEUED", b"QUEUED", [1, 2]]


def test_a_reply_nothing_asked_for_closes_the_connection():
    async def main() -> tuple[list[object], bool]:
        async with _Peer([b"+PONG\r\n+EXTRA\r\n"]) as port:
            pipe = await open_pipe({"host": "127.0.0.1", "port": port, "socket_timeout": 2.0})
            answered = await pipe.exchange(PING, 1)  # its own reply, then one too many
            with pytest.raises(RedisConnectionError, match="Connection closed"):
                pipe.exchange(PING, 1)  # out of step: closed at once
            return answered, pipe.closed

    assert run(main()) == ([b"PONG"], True)
