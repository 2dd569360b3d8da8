"""Operators' blocks (``block()``) this process has seen, for shadow policies.

An operator's explicit block is enforced in every mode, shadow and
``SHADOW`` included (as an admin override's block is). Redis says so in
the decision's reply (``blocks.lua``: a block by ``block()``), and
``together.lua`` lets it veto a request; this remembers, per (policy,
identity), until when the last such denial said so, so that
``reporting.shadowed`` leaves the Decision unmarked. Kept only for policies
that mark Decisions shadow (bookkeeping on their denials only), bounded.
"""

from __future__ import annotations

import threading
import time

#: The most identities remembered; the oldest entry goes first beyond it.
MAX_ENTRIES = 10_000

_blocked: dict[tuple[str, str], float] = {}
_lock = threading.Lock()


def note(policy: str, identity: str, seconds: float) -> None:
    """``identity`` is blocked by an operator under ``policy`` for ``seconds`` from now."""
    with _lock:
        if len(_blocked) >= MAX_ENTRIES:
            _blocked.pop(next(iter(_blocked)))
        _blocked[(policy, identity)] = time.monotonic() + seconds


def forget(policy: str, identity: str) -> None:
    """``identity`` is no longer blocked by an operator under ``policy``."""
    if _blocked:
        with _lock:
            _blocked.pop((policy, identity), None)


def blocked(policy: str, identity: str) -> bool:
    """Return whether an operator's block of ``identity`` under ``policy`` is in force."""
    if not _blocked:
        return False
    ends = _blocked.get((policy, identity))
    return ends is not None and ends > time.monotonic()
