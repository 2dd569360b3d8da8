"""The reset token: resets and flushes reach every process's deny cache within a second.

Each process's deny cache (``deny_cache.py``) answers a denied client's hits
without Redis. Only removing the state can make such a hit pass early, and
that may happen in another process (the admin, ``manage.py ratelimit
reset``, ``Policy.reset`` anywhere) or outside the app (``FLUSHDB``, Django's
``cache.clear()`` on the same database, a test suite's teardown).

So every reset writes a new random token to ``{KEY_PREFIX}:~epoch``
(:func:`bump`), outside every policy's keys and with a TTL
(:data:`TOKEN_TTL_MS`). A deny cache trusts its entries only while it has
read that token less than :data:`CHECK_INTERVAL` seconds ago, counted from
before the read was sent, and drops the entries remembered before a read
that finds another token. A flush removes the token: the read writes a new
one (``reset_epoch.lua``, one EVALSHA) and that is a change too. A process
first reads the token when Redis first denies it a hit: that denial is not
remembered (it was asked for before the read), the next ones are. So no
token is written before some process has a denial to vouch for, and a
process that is never denied never reads it.

The bound: a denial remembered by any process is not answered later than
:data:`CHECK_INTERVAL` seconds after the reset's token was written (by that
process's clock), since a read that started later would have seen it.

The cost: a process reads the token only when it is about to answer from
its cache and its last read is older than :data:`CHECK_INTERVAL`: at most
one command a second per process, however many denied hits it answers,
and none while it answers none. On a Redis Cluster the token lives on the
node that owns its slot: a flush of that node is seen, a flush of another
node only when the token expires (a reset through the app is always seen).
"""

from __future__ import annotations

import uuid
from typing import Any

from asgiref.sync import sync_to_async

from django_rl.backends import LuaScript, RedisNode, get_backend
from django_rl.backends.aio_node import aeval, arun, async_capable, connection
from django_rl.conf import get_settings

#: Seconds a process trusts its deny cache after reading the token: the bound.
CHECK_INTERVAL = 1.0
#: The token's TTL; a token that expires is a change (every cache starts over).
TOKEN_TTL_MS = 7 * 86_400_000

SCRIPT = LuaScript.from_package(__package__, "reset_epoch.lua")


def token_key(prefix: str) -> str:
    """Return the key of the reset token: ``{prefix}:~epoch``, no policy's key."""
    return f"{prefix}:~epoch"


def read_token(fresh: str) -> bytes:
    """Return the reset token now in force, writing ``fresh`` if there is none; one round trip.

    :raises redis.exceptions.RedisError: if Redis cannot answer.
    """
    settings = get_settings()
    key = token_key(settings.key_prefix)
    token: bytes = get_backend(settings.connection).run(key, _read_or_write, fresh)
    return token


async def aread_token(fresh: str) -> bytes:
    """:func:`read_token` on the event loop (the same script, awaited).

    :raises redis.exceptions.RedisError: if Redis cannot answer.
    """
    settings = get_settings()
    key = token_key(settings.key_prefix)
    backend = get_backend(settings.connection)
    if not async_capable(backend):
        token: bytes = await sync_to_async(read_token, thread_sensitive=False)(fresh)
        return token
    token = await arun(backend, key, _aread_or_write, fresh)
    return token


async def _aread_or_write(node: RedisNode, key: str, fresh: str) -> Any:
    return await aeval(node, SCRIPT, [key], [fresh, TOKEN_TTL_MS])


def new_token() -> str:
    """Return a random token, unlike any other."""
    return uuid.uuid4().hex


def bump() -> None:
    """Write a new reset token: every process's deny cache drops its entries within the bound.

    :raises redis.exceptions.RedisError: if Redis cannot answer.
    """
    settings = get_settings()
    get_backend(settings.connection).run(token_key(settings.key_prefix), _write)


async def abump() -> None:
    """:func:`bump`, awaited on the event loop (the same SET).

    :raises redis.exceptions.RedisError: if Redis cannot answer.
    """
    settings = get_settings()
    backend = get_backend(settings.connection)
    if async_capable(backend):
        await arun(backend, token_key(settings.key_prefix), _awrite)
    else:
        await sync_to_async(bump, thread_sensitive=False)()


async def _awrite(node: RedisNode, key: str) -> None:
    async with connection(node) as client:
        await client.set(key, new_token(), px=TOKEN_TTL_MS)


def _read_or_write(node: RedisNode, key: str, fresh: str) -> Any:
    return SCRIPT(node.client, [key], [fresh, TOKEN_TTL_MS])


def _write(node: RedisNode, key: str) -> None:
    node.client.set(key, new_token(), px=TOKEN_TTL_MS)


__all__ = [
    "CHECK_INTERVAL",
    "TOKEN_TTL_MS",
    "abump",
    "aread_token",
    "bump",
    "new_token",
    "read_token",
    "token_key",
]
