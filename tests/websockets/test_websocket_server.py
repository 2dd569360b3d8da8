"""The Channels mixin under daphne and uvicorn: a real server process, a real websocket client.

The test starts each server on a free port serving ``tests/sites/asgi_channels.py``
(settings ``tests/sites/settings_channels.py``: the suite's redis-server,
``NUM_PROXIES`` 1, so each client names its address by X-Forwarded-For) and
talks to its async and its sync consumer with the ``websockets`` client:
the third connect of a client is closed with 4029 after the handshake, the
fourth message is answered ``{"error": "rate_limited", "retry_after": s}``
and the socket stays open.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Iterator

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.support import servers
from tests.support.redis_server import free_port, reap, spawn

pytestmark = pytest.mark.slow


APPLICATION = "tests.sites.asgi_channels:application"


def command(server: str, port: int) -> list[str]:
    if server == "daphne":
        return [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), APPLICATION]
    # The scope's client as the socket has it: X-Forwarded-For is django_rl's to read.
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-proxy-headers",
        "--log-level",
        "warning",
        APPLICATION,
    ]


@pytest.fixture(scope="module", params=["daphne", "uvicorn"])
def server(request, redis_server) -> Iterator[int]:
    path = os.pathsep.join([str(servers.ROOT), os.environ.get("PYTHONPATH", "")])
    for _attempt in range(3):
        port = free_port()
        process = spawn(
            command(request.param, port),
            {
                "DJANGO_SETTINGS_MODULE": "tests.sites.settings_channels",
                "DJANGO_RL_TEST_REDIS": redis_server.url,
                "PYTHONPATH": path,
            },
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                time.sleep(0.1)
                continue
            try:
                yield port
            finally:
                reap(process)
            return
        reap(process)
    raise RuntimeError(f"{request.param} did not start")


def open_socket(port: int, path: str, client: str) -> object:
    return connect(
        f"ws://127.0.0.1:{port}{path}",
        additional_headers={"X-Forwarded-For": client},
        proxy=None,
        open_timeout=10,
    )


@pytest.mark.parametrize(
    ("path", "client"), [("/ws/async/", "203.0.113.1"), ("/ws/sync/", "203.0.113.2")]
)
def test_connect_and_message_limits_under_a_server(server, path, client):
    with open_socket(server, path, client) as first:
        answers = []
        for n in range(5):
            first.send(f"m{n}")
            answers.append(first.recv(timeout=10))
        assert answers[:3] == ["echo:m0", "echo:m1", "echo:m2"]
        for answer in answers[3:]:
            denied = json.loads(answer)
            assert denied["error"] == "rate_limited"
            assert 0 < denied["retry_after"] <= 60
        with open_socket(server, path, client) as second:
            second.send("hello")  # messages of this address: still denied
            assert json.loads(second.recv(timeout=10))["error"] == "rate_limited"
        # The third connect of this address: accepted, then closed with 4029.
        with open_socket(server, path, client) as third:
            with pytest.raises(ConnectionClosed) as closed:
                third.recv(timeout=10)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 4029
        # The first socket is still open.
        first.send("still")
        assert json.loads(first.recv(timeout=10))["error"] == "rate_limited"
