"""A decision's command is written on a plain socket in one system call, as sendall would write it.

CPython polls a socket that has a timeout before each ``send``; django_rl
writes a plain socket's descriptor itself (``socket_writes.write``), and
leaves ``sendall`` what the kernel cannot take at once. The system calls are
counted by strace, on a real connection to the suite's redis-server.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import ClassVar

import pytest

from bench.measure import SendCounter
from django_rl import get_policy
from django_rl.backends.socket_writes import write as _write

ROOT = Path(__file__).resolve().parent.parent.parent

#: Run under strace: 40 PINGs and 40 transactions on the socket path of a
#: redis-py connection with a timeout, between two markers written to fd 2.
CHILD = r"""
import os, sys
import redis
from django_rl.backends.redis_py import (
    SocketPath, connected_socket, socket_path_possible,
)
connection = redis.Connection(port=int(sys.argv[1]), socket_timeout=0.5)
connection.connect()
assert socket_path_possible(connection), "hiredis' parser expected"
print("fd", connected_socket(connection).fileno(), flush=True)
exchange = SocketPath(connection).exchange
ping = b"*1\r\n$4\r\nPING\r\n"
commands = [("MULTI",), ("INCR", "k"), ("PEXPIRE", "k", 9000), ("EXEC",)]
multi = b"".join(b"".join(connection.pack_command(*command)) for command in commands)
os.write(2, b"BEGIN\n")
for _ in range(40):
    assert exchange(ping, 1) == [b"PONG"]
for _ in range(40):
    replies = exchange(multi, 4)
    assert replies[-1][1] == 1, replies
os.write(2, b"END\n")
"""


@pytest.mark.skipif(shutil.which("strace") is None, reason="no strace (make test installs it)")
def test_a_round_trip_on_the_socket_path_is_one_write_one_poll_and_one_read(redis_server, tmp_path):
    trace = tmp_path / "trace"
    result = subprocess.run(
        [
            "strace", "-f", "-qq", "-o", str(trace),
            "-e", "trace=poll,ppoll,select,pselect6,write,sendto,sendmsg,read,recvfrom,recvmsg",
            sys.executable, "-c", CHILD, str(redis_server.port),
        ],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    fd = int(re.search(r"^fd (\d+)$", result.stdout, re.M).group(1))  # type: ignore[union-attr]
    lines = trace.read_text().splitlines()
    begin = next(i for i, line in enumerate(lines) if 'write(2, "BEGIN' in line)
    end = next(i for i, line in enumerate(lines) if 'write(2, "END' in line)
    calls: dict[str, int] = {}
    for line in lines[begin + 1 : end]:
        found = re.search(r"\b(\w+)\((?:\[\{fd=)?(\d+)\b", line)
        if found and int(found.group(2)) == fd:
            calls[found.group(1)] = calls.get(found.group(1), 0) + 1
    # 80 round trips: each one write(2) of the whole command (no poll before
    # it), one poll for the reply (the socket's timeout) and one recvfrom.
    assert calls == {"write": 80, "poll": 80, "recvfrom": 80}


def test_what_the_kernel_cannot_take_at_once_is_sent_in_order_by_sendall():
    ours, theirs = socket.socketpair()
    ours.settimeout(5)
    payload = os.urandom(1 << 20) * 24  # far more than a socket's buffer
    received = bytearray()

    def read_slowly() -> None:
        while len(received) < len(payload):
            time.sleep(0.001)
            data = theirs.recv(1 << 16)
            if not data:  # our end closed (the write failed): stop
                return
            received.extend(data)

    reader = threading.Thread(target=read_slowly, daemon=True)
    reader.start()
    try:
        _write(ours, payload)
    finally:
        reader.join(30)
        ours.close()
        theirs.close()
    assert bytes(received) == payload


def test_a_peer_that_never_reads_makes_the_write_time_out_as_sendall_does():
    ours, theirs = socket.socketpair()
    ours.settimeout(0.3)
    began = time.monotonic()
    try:
        with pytest.raises(TimeoutError):
            _write(ours, b"x" * (64 << 20))
    finally:
        ours.close()
        theirs.close()
    assert 0.3 <= time.monotonic() - began < 10


def test_a_subclass_of_socket_such_as_ssl_sockets_is_written_by_its_own_sendall():
    class Recording(socket.socket):  # as ssl.SSLSocket: a socket.socket that must encrypt
        sent: ClassVar[list[bytes]] = []

        def sendall(self, data, flags=0):  # type: ignore[no-untyped-def]
            self.sent.append(bytes(data))
            return super().sendall(data, flags)

    ours, theirs = socket.socketpair()
    recording = Recording(fileno=ours.detach())
    try:
        _write(recording, b"*1\r\n$4\r\nPING\r\n")
        assert recording.sent == [b"*1\r\n$4\r\nPING\r\n"]
        assert theirs.recv(100) == b"*1\r\n$4\r\nPING\r\n"
    finally:
        recording.close()
        theirs.close()


def test_a_closed_peer_raises_the_error_sendall_raises():
    ours, theirs = socket.socketpair()
    ours.settimeout(0.5)
    theirs.close()
    try:
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            _write(ours, b"*1\r\n$4\r\nPING\r\n")
    finally:
        ours.close()


def test_the_benches_count_each_decision_written_on_the_socket_as_one_round_trip(redis_client):
    policy = get_policy("per_minute")
    policy.hit("ip:192.0.2.90")  # connected, its script loaded: one write per decision from here
    counter = SendCounter()
    with counter.counting():
        for i in range(4):
            policy.hit(f"ip:192.0.2.{91 + i}")
    assert counter.sends == 4
