"""The app's keys in Redis: which servers hold them, bounded SCANs, keys read back.

Listing never uses ``KEYS``: it walks the keyspace with ``SCAN ... MATCH``
and stops after a budget of keys per request, handing back a cursor to go on
from. An operator's search text is turned into a pattern here, so nothing a
person types can widen a pattern beyond the app's prefix.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from django_rl.core.keys import POLICY_NAME, STORED_IDENTITY, KeyIdentity
from django_rl.inspection.targets import address_identity

if TYPE_CHECKING:
    from redis import Redis

    from django_rl.backends import Backend

#: Keys SCAN may look at for one request (the sum of its COUNT hints).
SCAN_BUDGET = 20_000
#: The largest COUNT of one SCAN call; the smallest is the page size.
MAX_SCAN_COUNT = 5_000
#: Where a listing starts: the first server, SCAN cursor 0.
FIRST_PAGE = "0:0"
#: The largest cursor SCAN takes (an unsigned 64-bit number); Redis answers
#: "ERR invalid cursor" to any above it.
MAX_SCAN_POSITION = 2**64 - 1

_CURSOR = re.compile(r"(?P<target>[0-9]{1,4}):(?P<position>[0-9]{1,20})")
#: What may follow ``{prefix}:`` in a key of this app (see keys.key_for).
_KEY_TAIL = re.compile(
    rf"(?P<policy>{POLICY_NAME.pattern}):\{{(?P<identity>[A-Za-z0-9.:_@~-]{{1,100}})\}}"
    r":(?P<fingerprint>[0-9a-f]{8})(?::(?P<window>[0-9]{1,20})|:b)?"
)
#: Characters an identity in a key can contain; none is special in a glob.
_IDENTITY_CHARACTERS = re.compile(r"[A-Za-z0-9.:_@~-]{0,100}")


class CursorError(ValueError):
    """A listing cursor that is not one, or names a server the keyspace does not have.

    A bad request, not a failure to read Redis: the message says what to do.
    """


@dataclass(frozen=True)
class ParsedKey:
    """One key of the app, taken apart.

    :ivar identity: as the key holds it: verbatim, or a digest
        (``kind:~<hex>``, see ``keys.safe_identity``).
    :ivar window: the fixed window's index, ``None`` for other algorithms.
    """

    key: str
    policy: str
    identity: KeyIdentity
    fingerprint: str
    window: int | None


def parse_key(prefix: str, key: str) -> ParsedKey | None:
    """Take a key apart; ``None`` if it is not one this app writes under ``prefix``."""
    head, colon, tail = key.partition(":")
    if head != prefix or not colon:
        return None
    match = _KEY_TAIL.fullmatch(tail)
    if match is None or not STORED_IDENTITY.fullmatch(match["identity"]):
        return None
    window = match["window"]
    return ParsedKey(
        key=key,
        policy=match["policy"],
        identity=KeyIdentity(match["identity"]),
        fingerprint=match["fingerprint"],
        window=int(window) if window is not None else None,
    )


def is_bookkeeping(prefix: str, key: str) -> bool:
    """Return whether ``key`` is the app's own, not a counter: ``{prefix}:~...``.

    Such keys (the rate catalogue of per-plan policies, ``plans.py``) are
    neither listed nor counted as keys of another form.
    """
    return key.startswith(f"{prefix}:~")


def operator_identity(text: str, policy: str | None = None) -> str:
    """Return what an operator typed as an identity that ``Policy`` methods accept.

    A digest as the admin page shows it (``x-api-key:~3f2a...``) is taken as
    the key holds it. With ``policy``, an address (``127.0.0.1``,
    ``IP:127.0.0.1``, ``127.0.0.1:8000``) is the identity requests from it
    have under that policy, as counted (``ip:127.0.0.1``, grouped by
    ``IPV4_PREFIX``/``IPV6_PREFIX``, or the drop-ins' own: see
    ``inspection/targets.py``), as the admin's override form takes it.
    Anything else is a raw identity, made safe the way a request's would be
    (so typing the raw value of a digested identity finds it too).

    :raises ValueError: with ``policy``, for a network (not one identity) or
        an address the policy never counts by; the message says what to type.
    """
    if "~" in text and STORED_IDENTITY.fullmatch(text):
        return KeyIdentity(text)
    if policy is not None:
        found = address_identity(policy, text)
        if found is not None:
            return found
    return text


def check_filters(policy: str | None, identity_prefix: str) -> None:
    """Check what narrows a listing: nothing in it may be special in a SCAN pattern.

    :raises ValueError: if ``policy`` is not a valid policy name, or
        ``identity_prefix`` has characters no identity in a key can have.
    """
    if policy is not None and not POLICY_NAME.fullmatch(policy):
        raise ValueError(f"{policy!r} is not a policy name")
    if not _IDENTITY_CHARACTERS.fullmatch(identity_prefix):
        raise ValueError(
            "identities in keys have only letters, digits and .:_@-~ (others are digested): "
            "search for the exact identity to find a digested one"
        )


def match_pattern(prefix: str, policy: str | None = None, identity_prefix: str = "") -> str:
    """Return the SCAN pattern of the app's keys, narrowed to a policy and an identity prefix.

    :raises ValueError: as :func:`check_filters`.
    """
    check_filters(policy, identity_prefix)
    # None of the characters check_filters allows is special in a glob pattern.
    # Without a policy, "[^~]*" leaves out the app's bookkeeping keys
    # ({prefix}:~...: the history of observability/history.py, 60 per policy,
    # among them), which would otherwise fill a page's SCAN with keys that
    # are never listed.
    policy_part = policy if policy is not None else "[^~]*"
    if not identity_prefix:
        return f"{prefix}:[^~]*" if policy is None else f"{prefix}:{policy}:*"
    return f"{prefix}:{policy_part}:{{{identity_prefix}*"


@dataclass(frozen=True)
class Targets:
    """The servers a listing walks, as :func:`answering_targets` found them.

    :ivar clients: a client per server, in the backend's order of its nodes;
        ``None`` for one that did not answer (the walk skips it).
    :ivar keys_in_redis: DBSIZE summed over the servers that answered.
    :ivar unavailable: the addresses of those that did not.
    """

    clients: list[Redis | None]
    keys_in_redis: int
    unavailable: tuple[str, ...]


def answering_targets(backend: Backend) -> Targets:
    """Return a client for each server whose keyspace holds the app's keys, with its DBSIZE.

    The one server, or every primary of a Redis Cluster, ordered by address;
    listings walk them one after another (the cursor names which), within
    one budget for them all. (A failover between two pages changes the
    primaries: the next page may then skip or repeat some keys.) A cluster
    primary that does not answer (down, before its replica is promoted)
    leaves its keys out of a listing instead of failing it whole.

    :raises redis.exceptions.RedisError: if no server answers.
    """
    clients: list[Redis | None] = []
    unavailable: list[str] = []
    keys = 0
    failure: RedisError | None = None
    for node in backend.nodes():
        try:
            client = node.client
            keys += int(client.dbsize())
        except RedisError as exc:
            failure = failure or exc
            clients.append(None)
            unavailable.append(node.address or node.alias)
            continue
        clients.append(client)
    if failure is not None and all(client is None for client in clients):
        raise failure
    return Targets(clients, keys, tuple(unavailable))


@dataclass(frozen=True)
class ScanStep:
    """What one bounded walk found.

    :ivar next_cursor: where the next page starts; ``None`` once every
        server has been walked to the end.
    :ivar examined: keys SCAN was asked to look at (its COUNT hints summed).
    """

    keys: list[str]
    next_cursor: str | None
    examined: int


def parse_cursor(cursor: str) -> tuple[int, int]:
    """Return (server index, SCAN cursor) of a listing cursor such as ``"0:1234"``.

    :raises CursorError: if it is not one (a SCAN cursor above
        :data:`MAX_SCAN_POSITION` included).
    """
    match = _CURSOR.fullmatch(cursor)
    if match is None:
        raise CursorError(f"{cursor!r} is not a listing cursor")
    position = int(match["position"])
    if position > MAX_SCAN_POSITION:
        raise CursorError(
            f"{cursor!r} is not a listing cursor: its SCAN position is above {MAX_SCAN_POSITION}"
        )
    return int(match["target"]), position


def scan_keys(
    targets: Sequence[Redis | None],
    pattern: str,
    cursor: str,
    *,
    want: int,
    budget: int = SCAN_BUDGET,
) -> ScanStep:
    """Walk from ``cursor`` until ``want`` keys match, the budget is spent, or the end.

    SCAN's COUNT starts at ``want`` and grows while few keys match (a narrow
    filter on a big keyspace), so a page takes few round trips either way.
    A target that is ``None`` (a server that did not answer) is skipped.
    A page can hold more than ``want`` keys: the last SCAN call's keys are
    all kept, since a cursor cannot stop half way through a call.

    :raises CursorError: if ``cursor`` is not one, or names a server beyond
        ``targets`` (a cursor from before a cluster lost a primary, or made up).
    """
    index, position = parse_cursor(cursor)
    if index >= len(targets):
        raise CursorError(
            f"the listing cursor {cursor!r} names server {index}, but the keys are on "
            f"{len(targets)} (numbered from 0): start again from the first page"
        )
    found: dict[str, None] = {}  # SCAN may return a key twice; keep the order
    examined = 0
    count = max(1, min(want, budget))
    while index < len(targets) and len(found) < want and examined < budget:
        target = targets[index]
        if target is None:
            index, position = index + 1, 0
            continue
        count = min(count, budget - examined)
        position, batch = target.scan(position, match=pattern, count=count)
        examined += count
        for key in batch:
            found[key.decode("utf-8", "replace") if isinstance(key, bytes) else key] = None
        if position == 0:
            index += 1
        if len(batch) * 2 < count:
            count = min(count * 4, MAX_SCAN_COUNT)
    next_cursor = f"{index}:{position}" if index < len(targets) else None
    return ScanStep(list(found), next_cursor, examined)
