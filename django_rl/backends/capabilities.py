"""What a Redis server supports, learned from the server itself, once per connection target.

django_rl runs on Redis 6.2 and later, and on Valkey (which answers as a
Redis 7.2). The commands differ by version in one place today: ``PEXPIREAT
... NX`` (set a TTL only where none is) exists from Redis 7.0. A fixed
window sends it where the server has it, and plain ``PEXPIREAT`` elsewhere
(see ``algorithms/fixed_window.py``: every writer of a window sets the same
expiry, so the plain form is as exact, at the price of replicating the
command on every hit).

The server is asked with ``HELLO`` (no arguments: it changes nothing on the
connection, and every ACL user may run it), then, where ``HELLO`` is refused
(a proxy, a renamed command), with ``INFO server``. Where neither answers,
the server is taken for the oldest supported one: the commands every
supported version has.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

if TYPE_CHECKING:
    from redis import Redis

logger = logging.getLogger("django_rl")

#: The oldest Redis that django_rl supports (and tests: see README).
MINIMUM_VERSION = (6, 2, 0)
#: The first Redis with ``EXPIRE``'s ``NX`` option.
EXPIRE_OPTIONS_VERSION = (7, 0, 0)


class Capabilities(NamedTuple):
    """A server's name, version and what django_rl uses of it.

    :ivar server: ``"redis"`` or ``"valkey"`` (or what else the server calls
        itself); ``""`` when it would not say.
    :ivar version: its own version (Valkey's start at 7.2, with the commands
        of Redis 7.2, so one scale serves both); ``None`` when unknown.
    :ivar label: the server's own version, for people: ``Valkey 9.1.2``.
    :ivar expire_nx: whether ``PEXPIREAT`` takes ``NX``.
    """

    server: str
    version: tuple[int, int, int] | None
    label: str
    expire_nx: bool

    @property
    def supported(self) -> bool:
        """Return False only for a server known to be older than :data:`MINIMUM_VERSION`."""
        return self.version is None or self.version >= MINIMUM_VERSION


#: What is assumed of a server that says nothing of itself.
UNKNOWN = Capabilities("", None, "an unknown Redis version", expire_nx=False)


def parse_version(text: object) -> tuple[int, int, int] | None:
    """Return ``(major, minor, patch)`` of a version string such as ``"7.0.15"``, or ``None``."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    match = re.match(r"\s*(\d+)\.(\d+)(?:\.(\d+))?", str(text))
    if match is None:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def from_server_info(info: dict[str, Any]) -> Capabilities:
    """Build Capabilities from ``HELLO``'s map or ``INFO server``'s fields.

    ``HELLO`` says ``server`` and ``version`` (Valkey: ``valkey`` and its own
    version); ``INFO`` says ``redis_version`` (Valkey adds ``valkey_version``
    and ``server_name``, and reports the Redis version it answers as).
    """
    fields = {_text(k): v for k, v in info.items()}
    server = _text(fields.get("server") or fields.get("server_name") or "redis").lower()
    own = fields.get("valkey_version") or fields.get("version") or fields.get("redis_version")
    own_version = parse_version(own)
    if own_version is None:
        return UNKNOWN
    # Valkey's versions start at 7.2, with the commands of Redis 7.2: one scale serves both.
    label = f"{server.capitalize() if server else 'Redis'} {'.'.join(map(str, own_version))}"
    return Capabilities(server, own_version, label, own_version >= EXPIRE_OPTIONS_VERSION)


def detect(client: Redis) -> Capabilities:
    """Ask the server what it is: ``HELLO``, else ``INFO server``, else :data:`UNKNOWN`.

    :raises redis.exceptions.RedisError: if the server does not answer (an
        outage; an error reply such as NOPERM or an unknown command only
        moves on to the next way of asking).
    """
    try:
        found = from_hello(client.execute_command("HELLO"))  # type: ignore[no-untyped-call]
        if found is not None:
            return found
    except ResponseError:
        pass  # Redis before 6.2 wants a protocol version; a proxy may not know HELLO
    try:
        info = client.info("server")
    except ResponseError:
        return UNKNOWN
    return from_server_info(info) if isinstance(info, dict) else UNKNOWN


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class Learned:
    """What one server supports, learned once (by one thread) and kept until forgotten.

    :param server: what the log lines call the server (``Health.name``).
    :ivar known: the capabilities learned, ``None`` until then and after the
        node forgot them (a reconnection, a failover: see ``RedisNode.capabilities``).
    """

    def __init__(self, server: str) -> None:
        self.server = server
        self.known: Capabilities | None = None
        self._lock = threading.Lock()
        self._failed_at = -math.inf

    def learn(self, client: Callable[[], Redis]) -> Capabilities:
        """Return the capabilities, asked on ``client()`` unless another thread just did.

        A server older than the minimum supported version is logged as an error.

        :raises redis.exceptions.RedisError: if Redis does not answer.
        """
        asked_at = time.monotonic()
        with self._lock:  # one thread asks; the others wait for its answer
            capabilities = self.known
            if capabilities is None:
                if self._failed_at >= asked_at:
                    # The thread this one waited for asked, and Redis did not
                    # answer it either: give up with it, instead of each
                    # waiting thread paying its own timeout in turn.
                    raise RedisConnectionError(
                        "the Redis server could not be asked what it supports"
                    )
                try:
                    capabilities = detect(client())
                except BaseException:
                    self._failed_at = time.monotonic()
                    raise
                self.settle(capabilities)
            return capabilities

    def settle(self, capabilities: Capabilities) -> None:
        """Keep ``capabilities``, learned by a caller (the async path asks on its own
        connection); a server older than the minimum supported version is logged."""
        if not capabilities.supported:
            logger.error(
                "Redis for rate limiting (%s) is %s; django_rl supports Redis %s and "
                "later (and Valkey): decisions may fail or follow fail_open. "
                "Upgrade the server.",
                self.server,
                capabilities.label,
                ".".join(map(str, MINIMUM_VERSION[:2])),
            )
        self.known = capabilities


def from_hello(reply: object) -> Capabilities | None:
    """Return the capabilities ``HELLO``'s reply tells (RESP2's flat list or RESP3's map)."""
    if isinstance(reply, list):  # RESP2: a flat list of names and values
        reply = dict(zip(reply[::2], reply[1::2], strict=False))
    return from_server_info(reply) if isinstance(reply, dict) else None
