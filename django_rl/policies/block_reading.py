"""``block()`` on a policy without ``block_for`` or ``escalate``: its decisions read blocks.

A policy with ``block_for`` or ``escalate`` decides by ``Blocking``, its
algorithm with the identity's block hash read in the same round trip. One
without them decides by its algorithm alone, the fastest decision (the
fixed window's MULTI/EXEC reads no block), until code blocks one of its
identities. Then the policy reads blocks from then on, as if it had
``block_for`` (no block of its own ever starts: its settings have none):

* **in this process at once**: :func:`note` switches every built policy of
  that name (``Policy.read_blocks``) before the block is written, and a
  policy built later while the block lasts is built switched (:func:`watch`);
* **in every other process within about a second**: the block also writes
  its end to the mark ``{KEY_PREFIX}:~blocked`` (``block_mark.lua``, a hash:
  policy name -> the end of its latest block, ms; TTL past that end), in the
  block's own round trip where the mark lives on the same server (on a Redis
  Cluster, one more). Each process that decides reads the mark once a
  second (:func:`poll`, one ``HGETALL`` in the overrides loader's thread,
  off the decision path) and switches the policies it names.

A switched policy stays switched for the rest of its life (reading a block
that has ended costs a little, never a wrong answer); a mark is trusted for
:data:`SLACK_S` past its end, for clocks that differ between machines.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from django_rl.algorithms.blocking import MARK_SCRIPT, Blocks
from django_rl.backends import get_backend
from django_rl.conf import get_settings
from django_rl.policies.blocks_spec import with_blocks

if TYPE_CHECKING:
    from django_rl.backends import RedisNode
    from django_rl.policies.plans import Variant
    from django_rl.policies.shape import PolicyShape

#: Seconds a mark is trusted past its block's end (the clocks of processes differ).
SLACK_S = 60.0
#: The most policy names remembered (a mark's names come from Redis: bounded).
MAX_MARKS = 1_000
#: The blocks of a policy that has none of its own: it only reads those code sets.
NO_BLOCKS = Blocks()

logger = logging.getLogger("django_rl")

#: policy name -> until when (``time.time()``) its decisions must read blocks.
_until: dict[str, float] = {}
#: The policies built in this process (weak: rebuilt ones go).
_built: weakref.WeakSet[PolicyShape] = weakref.WeakSet()
_lock = threading.Lock()


def mark_key(prefix: str) -> str:
    """Return the key of the mark: ``{prefix}:~blocked``, no policy's key."""
    return f"{prefix}:~blocked"


def reading_blocks(variant: Variant) -> Variant:
    """Return ``variant`` deciding with its identities' blocks read (itself if it does already)."""
    algorithm = with_blocks(variant.algorithm, NO_BLOCKS)
    return variant if algorithm is variant.algorithm else replace(variant, algorithm=algorithm)


def watch(policy: PolicyShape) -> None:
    """A policy was built: switch it now if a block of its name is in force, or later."""
    _built.add(policy)
    if _until and _until.get(policy.name, 0.0) > time.time():
        policy.read_blocks()


def note(name: str, seconds: float) -> None:
    """Policies named ``name`` read blocks: one of theirs lasts ``seconds`` from now."""
    until = time.time() + seconds + SLACK_S
    with _lock:
        if name not in _until and len(_until) >= MAX_MARKS:
            return
        if _until.get(name, 0.0) < until:
            _until[name] = until
    for policy in list(_built):
        if policy.name == name:
            policy.read_blocks()


def forget() -> None:
    """Forget every mark seen (for tests: switched policies stay so until rebuilt)."""
    with _lock:
        _until.clear()


def write_mark(node: RedisNode, key: str, name: str, ms: int) -> None:
    """Mark ``name``'s block of ``ms`` on the mark's own node (a Redis Cluster's: not the block's).

    :raises redis.exceptions.RedisError: if Redis cannot answer.
    """
    MARK_SCRIPT(node.client, [key], [name, ms, int(SLACK_S * 1000), node.script_time()])


def poll() -> None:
    """Read the mark (one ``HGETALL``) and switch the policies it names; never raises.

    The overrides loader's thread calls it once a second (``apps.py`` wires it).
    """
    try:
        settings = get_settings()
        marks = get_backend(settings.connection).run(mark_key(settings.key_prefix), _read)
    except RedisError:
        return  # the node logged the outage
    except Exception as exc:  # invalid settings: decisions report them
        logger.debug("Rate-limit blocks: cannot read the mark: %s", exc)
        return
    now_ms = time.time() * 1000  # (the server's clock wrote the ends: SLACK_S covers skew)
    for field, value in marks.items():
        try:
            left_ms = int(value) - now_ms
        except ValueError:
            continue
        if left_ms > -SLACK_S * 1000:
            note(field.decode("utf-8", "replace"), max(left_ms, 0) / 1000)


def _read(node: RedisNode, key: str) -> Any:
    return node.client.hgetall(key)


__all__ = [
    "MAX_MARKS",
    "NO_BLOCKS",
    "SLACK_S",
    "forget",
    "mark_key",
    "note",
    "poll",
    "reading_blocks",
    "watch",
    "write_mark",
]
