"""``enforce_percent``: a policy enforced for a stable share of its identities, shadow for the rest.

An identity is enforced when a stable hash of (policy name, identity) falls
below the percent: :func:`enforced`. The hash is BLAKE2b of the two,
independent of the process, the Python hash seed and restarts, so an identity
is in or out the same way in every process; the test is ``hash < percent``
of a uniform number, so raising the percent only adds identities (every
identity enforced at 30 is enforced at 60).

For an identity outside the percent, the policy decides and counts as usual
and its Decisions are marked ``shadow=True``, as a shadow policy's: a
would-be denial refuses nothing, counts as ``shadow_denied`` and sends
``rate_limited`` with ``shadow=True`` (an operator's block is still enforced:
``reporting.shadowed``).

The percent is the policy's own (its spec), or an admin override's (action
``percent``, ``overrides/rules.py``), which applies without a deploy like
the other overrides. :attr:`Policy.partial` says whether either may shadow
anyone, so the usual policy (100 %, no such override) pays one attribute
test; the registry keeps it true while an override of the percent is loaded
(:func:`note_overrides`).
"""

from __future__ import annotations

import hashlib
import time
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING

from django_rl.overrides.loader import LOADER, rules_for, use_load_listener
from django_rl.overrides.rules import PolicyRules

if TYPE_CHECKING:
    from django_rl.policies.policy import Policy

#: 2**64: the hash is a 64-bit number, compared with ``percent / 100`` of this.
_SPAN = 1 << 64


def share(name: str, identity: str) -> float:
    """Return where ``identity`` falls for policy ``name``: a stable number in [0, 100)."""
    digest = hashlib.blake2b(
        name.encode("utf-8", "surrogatepass") + b"\x00" + identity.encode("utf-8", "surrogatepass"),
        digest_size=8,
    ).digest()
    return int.from_bytes(digest, "big") * 100 / _SPAN


def enforced(name: str, identity: str, percent: float) -> bool:
    """Return whether policy ``name`` enforces ``identity`` at ``percent`` (0 to 100)."""
    if percent >= 100:
        return True
    if percent <= 0:
        return False
    return share(name, identity) < percent


def percent_of(policy: Policy) -> float:
    """Return the percent ``policy`` enforces now: an override's in force, else its own."""
    rules = rules_for(policy.name)
    if rules is not None:
        rule = rules.percent
        if rule is not None and rule.expires_at > time.time():
            return float(rule.rate)
    return policy.enforce_percent


def outside(policy: Policy, identity: str) -> bool:
    """Return whether ``identity`` is outside ``policy``'s percent (its Decisions are shadow)."""
    return not enforced(policy.name, identity, percent_of(policy))


#: The policies built in this process, for :func:`note_overrides` (weak: rebuilt ones go).
_BUILT: weakref.WeakSet[Policy] = weakref.WeakSet()


def track(policy: Policy) -> None:
    """Keep ``policy.partial`` true while its spec or a loaded override may shadow anyone.

    Reads the overrides loaded so far without starting the loader (a policy
    built outside a decision, by ``manage.py``, starts no thread).
    """
    rules = LOADER.rules.get(policy.name)
    policy.partial = policy.enforce_percent < 100 or (
        rules is not None and rules.percent is not None
    )
    _BUILT.add(policy)


def note_overrides(rules: Mapping[str, PolicyRules]) -> None:
    """The overrides loaded: set ``partial`` of every built policy (the loader calls it)."""
    for policy in list(_BUILT):
        found = rules.get(policy.name)
        policy.partial = policy.enforce_percent < 100 or (
            found is not None and found.percent is not None
        )


use_load_listener(note_overrides)

__all__ = ["enforced", "note_overrides", "outside", "percent_of", "share", "track"]
