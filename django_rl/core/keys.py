"""Redis key names.

``{KEY_PREFIX}:{policy}:{{identity}}:{fingerprint}[:window]``. The identity
sits in a Redis Cluster hash tag so all keys of one client share a slot; the
fingerprint changes with the algorithm and its parameters, so a changed policy
starts fresh instead of misreading old state.
"""

from __future__ import annotations

import hashlib
import re

#: Longest identity kept verbatim in a key; longer ones become a digest.
MAX_IDENTITY_LENGTH = 100

_SAFE_IDENTITY = re.compile(rf"[A-Za-z0-9.:_@-]{{1,{MAX_IDENTITY_LENGTH}}}")
#: ``verbatim(identity)``: a match when ``identity`` (a plain ``str``) goes into
#: keys as it is, else ``None`` (then :func:`safe_identity` says). The regex's
#: own ``fullmatch``, for the decisions' path: no Python frame.
verbatim = _SAFE_IDENTITY.fullmatch
_SAFE_KIND = re.compile(r"[A-Za-z0-9._@-]{1,32}")
#: Names that appear in keys: the key prefix and policy names.
SAFE_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
#: Names of inline policies (``@ratelimit(rate=...)``): ``@<group>`` or
#: ``@~<digest>`` (see ``inline.policy_name``). No name in settings has ``@``.
INLINE_NAME = re.compile(r"@(?:[A-Za-z0-9._-]{1,63}|~[0-9a-f]{24})")
#: Every policy name a key can hold: named or inline.
POLICY_NAME = re.compile(rf"{SAFE_NAME.pattern}|{INLINE_NAME.pattern}")
#: Everything :func:`safe_identity` can return: a verbatim identity or a digest.
STORED_IDENTITY = re.compile(
    rf"[A-Za-z0-9.:_@-]{{1,{MAX_IDENTITY_LENGTH}}}|(?:[A-Za-z0-9._@-]{{1,32}}:)?~[0-9a-f]{{24}}"
)


class KeyIdentity(str):
    """An identity exactly as it stands in a key: verbatim, or a digest (``kind:~<hex>``).

    :func:`safe_identity` keeps it as it is instead of digesting it again, so
    an identity read back from a key (the admin page, ``manage.py ratelimit``)
    can be passed to ``Policy.peek`` or ``Policy.reset``. Only code that read a
    key, or an operator, makes one; identities from requests are plain ``str``,
    so a client still cannot name a digest's key.

    :raises ValueError: if ``text`` is not something a key can hold.
    """

    __slots__ = ()

    def __new__(cls, text: str) -> KeyIdentity:
        if not STORED_IDENTITY.fullmatch(text):
            raise ValueError(f"{text!r} is not an identity as keys hold them")
        return super().__new__(cls, text)


def safe_identity(identity: str) -> str:
    """Return ``identity`` if it is safe to put in a key, else a digest of it.

    Safe means 1 to 100 characters from letters, digits and ``.:_@-``: no glob
    characters for SCAN patterns, no braces to break the hash tag, no control
    characters, bounded length. Anything else becomes ``<kind>:~<24 hex>``
    (``~<24 hex>`` when it has no safe ``kind:`` prefix). ``~`` never passes
    through from input, so a digest cannot collide with a verbatim identity.
    A :class:`KeyIdentity` is already in key form and is returned as it is.
    """
    if isinstance(identity, KeyIdentity):
        return str(identity)
    if _SAFE_IDENTITY.fullmatch(identity):
        return identity
    kind, colon, _ = identity.partition(":")
    digest = hashlib.blake2b(identity.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()
    if colon and _SAFE_KIND.fullmatch(kind):
        return f"{kind}:~{digest}"
    return f"~{digest}"


def fingerprint(description: str) -> str:
    """Return 8 hex characters that change whenever ``description`` does."""
    return hashlib.blake2b(description.encode(), digest_size=4).hexdigest()


def key_parts(prefix: str, policy: str, fingerprint: str) -> tuple[str, str]:
    """Return what comes before and after the identity in a policy's base keys.

    A policy computes them once, so building a key per decision is one
    concatenation.
    """
    return f"{prefix}:{policy}:{{", f"}}:{fingerprint}"


def key_for(prefix: str, policy: str, identity: str, fingerprint: str) -> str:
    """Return the base key of one (policy, identity); algorithms may add a suffix."""
    head, tail = key_parts(prefix, policy, fingerprint)
    return head + safe_identity(identity) + tail
