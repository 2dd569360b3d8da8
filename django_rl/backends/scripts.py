"""Lua scripts (EVALSHA, the source on NOSCRIPT), also inside pipelines."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any, ClassVar

from redis.exceptions import NoScriptError, ResponseError

from django_rl.backends.connections import NOT_SENT, KeptConnectionClient, direct_client
from django_rl.backends.resp import Argument, bulk

if TYPE_CHECKING:
    from redis import Redis
    from redis.client import Pipeline

    from django_rl.backends.connections import Command


class LuaScript:
    """A Lua script run with EVALSHA, sent in full on NOSCRIPT.

    The script is sent in full only the first time a server (or a server
    whose script cache was flushed, or a new server after a restart or a
    failover) sees it; every later call sends its SHA1. On NOSCRIPT the call
    is repeated as EVAL, which runs the script and caches it in the same
    round trip (``SCRIPT LOAD`` then EVALSHA would take two). It works with
    any client, so one instance serves every connection of the process, and
    every node of a Redis Cluster (each caches scripts of its own).
    """

    #: Every script made, so that a pipeline that met NOSCRIPT can load them.
    instances: ClassVar[list[LuaScript]] = []

    def __init__(self, source: str, name: str = "script") -> None:
        self.name = name
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()
        self._sha_bulk = bulk(self.sha)
        #: Each segment of ARGV seen (:meth:`run`), with its encoding.
        self._segments: dict[tuple[Argument, ...], bytes] = {}
        LuaScript.instances.append(self)

    @classmethod
    def from_package(cls, package: str, filename: str) -> LuaScript:
        """Load ``filename`` that ships inside ``package``."""
        source = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
        return cls(source, name=filename)

    @classmethod
    def from_parts(cls, package: str, filenames: Sequence[str], main: str, name: str) -> LuaScript:
        """Join the files ``filenames`` shipped inside ``package``, then ``main``: one script."""
        files = resources.files(package)
        parts = [files.joinpath(filename).read_text(encoding="utf-8") for filename in filenames]
        return cls("\n".join([*parts, main]), name=name)

    def __call__(self, client: Redis, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run the script on ``client`` and return its reply."""
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return client.eval(self.source, len(keys), *keys, *args)

    def run(
        self,
        client: Redis,
        keys: Sequence[str],
        args: Sequence[Argument],
        segments: Sequence[tuple[Argument, ...]] = (),
    ) -> Any:
        """Run the script as :meth:`__call__` does, ARGV ``args`` then each of ``segments``.

        On a kept connection the EVALSHA is encoded here (:meth:`encoded`)
        and sent on its short path, skipping redis-py's ``execute_command``
        and its encoder (for ``together.lua`` and ``refund.lua``, dozens of
        arguments): ``args`` are encoded on each call, each segment's
        encoding is kept (a part of ARGV that repeats from one call to the
        next, such as one policy's in ``together.lua``). NOSCRIPT goes
        :meth:`__call__`'s way (EVAL).
        """
        direct = direct_client(client)
        if direct is not None:
            # (A TypeError for an argument of another type: a bug here, not Redis's.)
            reply = direct.send_encoded(self.encoded(keys, args, segments))
            if not isinstance(reply, ResponseError):
                return reply
            if not isinstance(reply, NoScriptError):
                raise reply
        argv = [*args]
        for segment in segments:
            argv += segment
        return self(client, keys, argv)

    def encoded(
        self,
        keys: Sequence[str],
        args: Sequence[Argument],
        segments: Sequence[tuple[Argument, ...]] = (),
    ) -> bytes:
        """Return the EVALSHA of :meth:`run` in RESP, byte for byte as redis-py encodes it.

        Each segment's encoding is kept, up to :data:`MAX_SEGMENTS` (then
        they are all dropped: a ``concurrency`` policy's token is new on
        every hit), shared by the threads (each item replaced whole).
        """
        kept = self._segments
        arguments = 3 + len(keys) + len(args)  # EVALSHA, the SHA, the number of keys
        parts: list[bytes] = []
        for segment in segments:
            found = kept.get(segment)
            if found is None:
                found = b"".join(map(bulk, segment))
                if len(kept) >= MAX_SEGMENTS:
                    kept.clear()
                kept[segment] = found
            parts.append(found)
            arguments += len(segment)
        encoded_keys = []
        for key in keys:
            data = key.encode()  # as resp.bulk encodes a key, in one formatting
            encoded_keys.append(b"$%d\r\n%b\r\n" % (len(data), data))
        return b"*%d\r\n%b%b%b%b%b%b" % (
            arguments,
            _EVALSHA,
            self._sha_bulk,
            bulk(len(keys)),
            b"".join(encoded_keys),
            b"".join(map(bulk, args)),
            b"".join(parts),
        )

    def queue(self, pipe: Pipeline, keys: Sequence[str], args: Sequence[Any]) -> None:
        """Queue the script on a pipeline; :func:`replies_with_scripts` handles NOSCRIPT."""
        pipe.evalsha(self.sha, len(keys), *keys, *args)


_EVALSHA = bulk("EVALSHA")
#: The most segments' encodings a script keeps (:meth:`LuaScript.encoded`).
MAX_SEGMENTS = 1024
#: The most variable-argument encodings an EncodedScript keeps.
_MAX_TAILS = 64


class EncodedScript:
    """EVALSHA of ``script`` on one identity's keys, its fixed arguments encoded once.

    A decision sends the same command but for the key and the last few
    arguments (cost, count or look, the time): encoding the rest once saves
    redis-py's encoding of every argument on every call (about 6 µs of a
    decision's CPU, docs/performance.md). On the kept connection's short path
    only (``KeptConnectionClient.direct_ready``); anywhere else, and on
    NOSCRIPT, the script is run as :class:`LuaScript` runs it.

    ``encode(key, variable)`` returns the EVALSHA for ``key`` and the
    variable arguments in RESP, as redis-py encodes it: what the sync short
    path sends (:meth:`__call__`) and the loop's auto-pipelined connection
    too (``aio_node.aeval``), the same bytes.
    """

    def __init__(
        self,
        script: LuaScript,
        fixed: Sequence[int | str],
        variable: int,
        suffixes: Sequence[str] = ("",),
    ) -> None:
        """``suffixes``: the script's keys, each the key a call names and a suffix
        (``("",)``: that key alone; a block's ``("", ":b")``; a fixed window's
        counter and block, ``(":<window>", ":b")``). One or two.
        """
        if not 1 <= len(suffixes) <= 2:
            raise ValueError(f"an EncodedScript takes one or two keys, not {len(suffixes)}")
        self.script = script
        self.fixed = tuple(fixed)
        self.suffixes = tuple(suffixes)
        count = 3 + len(self.suffixes) + len(self.fixed) + variable  # EVALSHA, SHA, numkeys
        self.head = b"*%d\r\n" % count + _EVALSHA + bulk(script.sha) + bulk(len(self.suffixes))
        self.middle = b"".join(bulk(arg) for arg in self.fixed)
        #: The variable arguments' encodings seen so far (a decision's are
        #: nearly always the same few: cost 1, count, the server's time).
        self._tails: dict[tuple[int | str, ...], bytes] = {}
        first = self.suffixes[0].encode()
        # What follows the key's text in the command, and how much longer its
        # bulk string is than the key: chosen once, so that encoding a call
        # is one formatting, and no test of the shape (this runs on every
        # decision).
        self._grow = len(first)
        if len(self.suffixes) == 1:
            self._after_key = first + b"\r\n" + self.middle
            self.encode: Callable[[str, tuple[int | str, ...]], bytes] = self._one_key
        else:
            second = self.suffixes[1].encode()
            self._grow_second = len(second)
            self._between = first + b"\r\n"
            self._after_key = second + b"\r\n" + self.middle
            self.encode = self._two_keys

    def _one_key(self, key: str, variable: tuple[int | str, ...]) -> bytes:
        tail = self._tails.get(variable) or self._new_tail(variable)
        data = key.encode()  # as resp.bulk encodes a key, in one formatting
        return b"%b$%d\r\n%b%b%b" % (self.head, len(data) + self._grow, data, self._after_key, tail)

    def _two_keys(self, key: str, variable: tuple[int | str, ...]) -> bytes:
        tail = self._tails.get(variable) or self._new_tail(variable)
        data = key.encode()
        size = len(data)
        return b"%b$%d\r\n%b%b$%d\r\n%b%b%b" % (
            self.head,
            size + self._grow,
            data,
            self._between,
            size + self._grow_second,
            data,
            self._after_key,
            tail,
        )

    def _new_tail(self, variable: tuple[int | str, ...]) -> bytes:
        tail = b"".join(map(bulk, variable))
        if len(self._tails) < _MAX_TAILS:  # times (CLOCK "app") vary: bounded
            self._tails[variable] = tail
        return tail

    def keys(self, key: str) -> tuple[str, ...]:
        """Return the script's keys for ``key``."""
        return tuple(key + suffix for suffix in self.suffixes)

    def __call__(self, client: Redis, key: str, *variable: int | str) -> Any:
        """Run the script on ``client`` with ``key``, the fixed arguments, then ``variable``."""
        if type(client) is KeptConnectionClient:
            # (NOT_SENT where it cannot take it encoded)
            reply = client.send_encoded(self.encode(key, variable))
            if not isinstance(reply, ResponseError):
                if reply is not NOT_SENT:
                    return reply
            elif not isinstance(reply, NoScriptError):
                raise reply
        return self.script(client, self.keys(key), (*self.fixed, *variable))


def replies_with_scripts(client: KeptConnectionClient, commands: Sequence[Command]) -> list[Any]:
    """Return the replies to ``commands``, sent in one write, errors in place (``command_replies``).

    A script the server does not know (NOSCRIPT: a restarted server,
    ``SCRIPT FLUSH``, a node new to this process) fails inside the pipeline;
    then every script is loaded and the commands are sent again, which is
    harmless because they are reads (or writes that may run twice).
    """
    replies = client.command_replies(commands)
    if any(isinstance(reply, NoScriptError) for reply in replies):
        for script in LuaScript.instances:
            client.script_load(script.source)
        replies = client.command_replies(commands)
    return replies
