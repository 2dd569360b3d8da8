"""Overrides as decisions read them: rules per policy, matched by identity or address network.

An override changes what one policy decides for one identity (``user:42``,
``ip:203.0.113.9``, ``x-api-key:...``) or for every ``ip:`` identity in an
address network (``ip:203.0.113.0/24``), until it expires:

* ``rate``: the policy decides at another rate for it (its own state, see
  ``plans.Variant``);
* ``exempt``: the policy does not limit it (no Redis call);
* ``block``: the policy denies it (no Redis call), Retry-After the time left
  until the override expires, at most :data:`MAX_BLOCK_RETRY_AFTER`.

Targets are stored the way decisions compare them (:func:`normalize_target`),
so a match is a dict lookup. An identity matches an exact rule first, then the
rule of the most specific network that holds it; an expired rule is as if
there were none. Nothing here reads a database or Redis: ``loader.py`` builds
the rules in the background and decisions only read them.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django_rl.core.identities import UNKNOWN_IP, _normalize_address
from django_rl.core.keys import STORED_IDENTITY, safe_identity
from django_rl.core.reprs import short_repr

RATE = "rate"
EXEMPT = "exempt"
BLOCK = "block"
ACTIONS = (RATE, EXEMPT, BLOCK)
#: The longest Retry-After (seconds) a block answers with, however far away
#: its expiry: a block lifted early from the admin should not keep a client
#: that honours Retry-After away for days.
MAX_BLOCK_RETRY_AFTER = 3600.0
#: The longest IPv6 network an override may name: ``ip:`` identities of IPv6
#: clients are /64 networks (see ``identities.py``), so a longer one could
#: never hold one.
MAX_IPV6_PREFIX = 64


class TargetError(ValueError):
    """An override's target that names no identity or network; the message says why."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One override in force: what it does, until when.

    :ivar action: ``"rate"``, ``"exempt"`` or ``"block"``.
    :ivar rate: the rate of a ``"rate"`` override, else ``""``.
    :ivar expires_at: Unix time at which it stops applying.
    :ivar target: the identity or network it is for, as stored.
    """

    action: str
    rate: str
    expires_at: float
    target: str

    def retry_after(self, now: float) -> float:
        """Return the Retry-After of a block: seconds to its expiry, at most the cap."""
        return max(0.0, min(self.expires_at - now, MAX_BLOCK_RETRY_AFTER))


class PolicyRules:
    """The overrides of one policy: exact identities, then networks, most specific first."""

    __slots__ = ("digests", "exact", "networks")

    def __init__(self) -> None:
        #: identity, as keys hold it -> rule.
        self.exact: dict[str, Rule] = {}
        #: Whether an identity of :attr:`exact` is a digest (``kind:~hex``).
        self.digests = False
        #: (IP version, bits to shift an address by, network bits -> rule),
        #: longest prefix first.
        self.networks: list[tuple[int, int, dict[int, Rule]]] = []

    def match(self, identity: str) -> Rule | None:
        """Return the rule in force for ``identity`` now, or ``None``.

        Runs on every decision of a policy that has overrides: the usual
        identity (short, safe for a key) costs one dict lookup, and an
        ``ip:`` one, where the policy has networks, one address parse more.
        """
        exact = self.exact
        if exact:
            rule = exact.get(identity)
            # A stored digest holds "~", which no identity kept verbatim in a
            # key has: an identity equal to one was typed by a client, and is
            # digested like any other before it is compared.
            if rule is None or "~" in identity:
                rule = exact.get(safe_identity(identity)) if self.digests else None
            if rule is not None and rule.expires_at > time.time():
                return rule
        if self.networks and identity.startswith("ip:"):
            address = _address(identity[3:])
            if address is not None:
                version, value = address
                for network_version, shift, table in self.networks:
                    if network_version == version:
                        rule = table.get(value >> shift)
                        if rule is not None and rule.expires_at > time.time():
                            return rule
        return None

    def rates(self) -> set[str]:
        """Return the rates of this policy's rate overrides."""
        rules = [*self.exact.values(), *(r for _, _, t in self.networks for r in t.values())]
        return {rule.rate for rule in rules if rule.action == RATE}


_AF_INET, _AF_INET6, _inet_pton = socket.AF_INET, socket.AF_INET6, socket.inet_pton
_from_bytes = int.from_bytes


def _address(text: str) -> tuple[int, int] | None:
    """Return (IP version, address as an int) of an ``ip:`` identity's address, or ``None``."""
    try:
        return 4, _from_bytes(_inet_pton(_AF_INET, text), "big")
    except (OSError, ValueError):
        pass
    try:
        return 6, _from_bytes(_inet_pton(_AF_INET6, text), "big")
    except (OSError, ValueError):
        return None


def normalize_target(text: object) -> str:
    """Return an override's target as decisions compare it.

    * an address network, ``203.0.113.0/24`` or ``ip:2001:db8::/48`` (host
      bits are dropped): ``ip:<network>/<length>``; IPv6 networks at most /64;
    * ``ip:<address>`` or a bare address: the identity a request from that
      address has (``ip:2001:db8::1`` becomes its /64, ``ip:2001:db8::``);
    * a digest as the live counters page shows one (``x-api-key:~3f2a...``):
      as it is;
    * anything else: an identity as a policy's key function returns it
      (``user:42``), made safe the way a request's is (long or unusual ones
      become a digest).

    :raises TargetError: for an empty target, or an ``ip:`` one that holds no
        address or network.
    """
    if not isinstance(text, str) or not text.strip():
        raise TargetError("name an identity (such as user:42) or an address network")
    text = text.strip()
    body = text.removeprefix("ip:")
    if "/" in body:
        try:
            network = ipaddress.ip_network(body, strict=False)
        except ValueError:
            raise TargetError(
                f"{short_repr(text)} is not an address network such as 203.0.113.0/24 "
                "or 2001:db8::/48"
            ) from None
        if network.version == 6 and network.prefixlen > MAX_IPV6_PREFIX:
            raise TargetError(
                f"{short_repr(text)}: IPv6 clients are counted by their /64 network, so an "
                "override can name networks of at most /64"
            )
        return f"ip:{network.with_prefixlen}"
    if text == UNKNOWN_IP:
        return text
    if body != text or _address(text) is not None:
        address = _normalize_address(body)
        if address is None:
            raise TargetError(
                f"{short_repr(text)}: ip: must be followed by an IPv4 or IPv6 address"
            )
        return f"ip:{address}"
    if "~" in text and STORED_IDENTITY.fullmatch(text):
        return text  # a digest copied from the live counters page
    return safe_identity(text)


@dataclass(frozen=True)
class Row:
    """An override as the database holds it (see ``models.Override``)."""

    id: int
    policy: str
    identity: str
    action: str
    rate: str
    expires_at: datetime


def build_rules(rows: Iterable[Row]) -> tuple[dict[str, PolicyRules], list[str]]:
    """Return the rules of ``rows`` by policy, and why any row was left out.

    A row that names no valid target or action (written past the admin's
    form) is left out; its reason names its id.
    """
    by_policy: dict[str, PolicyRules] = {}
    networks: dict[str, dict[tuple[int, int], dict[int, Rule]]] = {}
    problems = []
    for row in rows:
        try:
            target = normalize_target(row.identity)
        except TargetError as exc:
            problems.append(f"override {row.id}: {exc}")
            continue
        if row.action not in ACTIONS or (row.action == RATE) != bool(row.rate):
            problems.append(f"override {row.id}: action {row.action!r} with rate {row.rate!r}")
            continue
        rate = row.rate if row.action == RATE else ""
        rule = Rule(row.action, rate, _unix(row.expires_at), target)
        rules = by_policy.setdefault(row.policy, PolicyRules())
        if "/" not in target:
            rules.exact[target] = rule
            rules.digests = rules.digests or "~" in target
            continue
        network = ipaddress.ip_network(target.removeprefix("ip:"))
        shift = network.max_prefixlen - network.prefixlen
        tables = networks.setdefault(row.policy, {})
        table = tables.setdefault((network.version, network.prefixlen), {})
        table[int(network.network_address) >> shift] = rule
    for policy, tables in networks.items():
        by_policy[policy].networks = [
            (version, (32 if version == 4 else 128) - length, tables[version, length])
            for version, length in sorted(tables, key=lambda vl: -vl[1])
        ]
    return by_policy, problems


def _unix(moment: datetime) -> float:
    # An aware datetime (USE_TZ) is exact; a naive one is local time, as
    # Django's naive datetimes are.
    return moment.timestamp()
