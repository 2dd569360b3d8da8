"""Lua scripts (EVALSHA, the source on NOSCRIPT) and read-only pipelines."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from redis.exceptions import NoScriptError

if TYPE_CHECKING:
    from redis import Redis
    from redis.client import Pipeline

T = TypeVar("T")


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
        LuaScript.instances.append(self)

    @classmethod
    def from_package(cls, package: str, filename: str) -> LuaScript:
        """Load ``filename`` that ships inside ``package``."""
        source = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
        return cls(source, name=filename)

    def __call__(self, client: Redis, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run the script on ``client`` and return its reply."""
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return client.eval(self.source, len(keys), *keys, *args)

    def queue(self, pipe: Pipeline, keys: Sequence[str], args: Sequence[Any]) -> None:
        """Queue the script on a pipeline; :func:`run_reads` handles NOSCRIPT."""
        pipe.evalsha(self.sha, len(keys), *keys, *args)


def run_reads(client: Redis, queue: Callable[[Pipeline], T]) -> tuple[T, list[Any]]:
    """Run the read-only commands ``queue`` puts on a pipeline, in one round trip.

    Return what ``queue`` returned and the replies. A script the server does
    not know (NOSCRIPT: a restarted server, ``SCRIPT FLUSH``) fails inside the
    pipeline; then every script is loaded and the pipeline is built and run
    again, which is harmless because nothing in it writes. ``client`` talks
    to one server: on a Redis Cluster, every key queued must live on it.

    :raises redis.exceptions.RedisError: if Redis cannot answer, or a command
        fails for another reason.
    """
    try:
        return _run_pipeline(client, queue)
    except NoScriptError:
        for script in LuaScript.instances:
            client.script_load(script.source)
    return _run_pipeline(client, queue)


def _run_pipeline(client: Redis, queue: Callable[[Pipeline], T]) -> tuple[T, list[Any]]:
    pipe = client.pipeline(transaction=False)
    queued = queue(pipe)
    return queued, pipe.execute()
