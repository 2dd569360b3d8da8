"""Overrides as decisions read them: rules per policy, matched by identity or address network.

An override changes what one policy decides for one identity (``user:42``,
``ip:203.0.113.9``, ``x-api-key:...``) or for every ``ip:`` identity in an
address network (``ip:203.0.113.0/24``), until it expires:

* ``rate``: the policy decides at another rate for it (its own state, see
  ``plans.Variant``);
* ``exempt``: the policy does not limit it (no Redis call);
* ``block``: the policy denies it (no Redis call), Retry-After the time left
  until the override expires, at most :data:`MAX_BLOCK_RETRY_AFTER`;
* ``percent``: the policy's ``enforce_percent`` (held in ``rate``, a number
  from 0 to 100), for every identity: its target is the whole policy
  (:data:`WHOLE_POLICY`); ``policies/rollout.py`` reads it.

Targets are compared the way the policy's decisions write identities
(:func:`normalize_target` under the policy's ``AddressForm``: an address is
the identity requests from it have, e.g. its /24 under ``IPV4_PREFIX`` 24),
so a match is a dict lookup. An identity matches an exact rule first, then the
rule of the most specific network that holds it; an expired rule is as if
there were none. Nothing here reads a database or Redis: ``loader.py`` builds
the rules in the background and decisions only read them.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from django_rl.core.addresses import normalize_address
from django_rl.core.identities import UNKNOWN_IP, AddressForm
from django_rl.core.keys import STORED_IDENTITY, safe_identity
from django_rl.core.reprs import short_repr

RATE = "rate"
EXEMPT = "exempt"
BLOCK = "block"
PERCENT = "percent"
ACTIONS = (RATE, EXEMPT, BLOCK, PERCENT)
#: The target of a ``percent`` override: the whole policy.
WHOLE_POLICY = "*"
#: The longest Retry-After (seconds) a block answers with, however far away
#: its expiry: a block lifted early from the admin should not keep a client
#: that honours Retry-After away for days.
MAX_BLOCK_RETRY_AFTER = 3600.0


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

    __slots__ = ("digests", "exact", "networks", "percent")

    def __init__(self) -> None:
        #: identity, as keys hold it -> rule.
        self.exact: dict[str, Rule] = {}
        #: Whether an identity of :attr:`exact` is a digest (``kind:~hex``).
        self.digests = False
        #: (IP version, bits to shift an address by, network bits -> rule),
        #: longest prefix first.
        self.networks: list[tuple[int, int, dict[int, Rule]]] = []
        #: An override of the policy's ``enforce_percent`` (its ``rate``: the percent).
        self.percent: Rule | None = None

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


#: How the ``ip`` key writes addresses at the default prefixes: the form of
#: :func:`normalize_target` when no policy is named.
DEFAULT_FORM = AddressForm()


def normalize_target(
    text: object, form: AddressForm | None = DEFAULT_FORM, policy: str | None = None
) -> str:
    """Return an override's target as decisions of a policy compare it.

    ``form`` is how the policy's identities write an address (see
    ``identities.AddressForm``; ``None``: they never hold one), ``policy``
    its name, for messages.

    * an address network, ``203.0.113.0/24`` or ``ip:2001:db8::/48`` (host
      bits are dropped): ``ip:<network>/<length>``, at most as long as the
      networks ``form`` groups addresses by (a longer one could never hold
      the identity of a request);
    * an address, bare or after ``ip:`` (any case), with or without a port
      (``203.0.113.9``, ``IP:203.0.113.9:443``, ``[2001:db8::1]:443``): the
      identity a request from that address has under ``form``
      (``ip:2001:db8::1`` becomes its /64, ``ip:2001:db8::``, by default);
    * a digest as the live counters page shows one (``x-api-key:~3f2a...``):
      as it is;
    * anything else: an identity as a policy's key function returns it
      (``user:42``), made safe the way a request's is (long or unusual ones
      become a digest).

    Applied to its own result with the same ``form``, it returns it unchanged.

    :raises TargetError: for an empty target, an ``ip:`` one that holds no
        address or network, an address or network for a policy that counts
        none, or a network narrower than ``form``'s; the message says what to
        type instead.
    """
    if not isinstance(text, str) or not text.strip():
        raise TargetError("name an identity (such as user:42) or an address network")
    text = text.strip()
    if split_address(text)[0] is not None:
        return _address_target(text, form, policy)
    if "~" in text and STORED_IDENTITY.fullmatch(text):
        return text  # a digest copied from the live counters page
    return safe_identity(text)


def split_address(text: str) -> tuple[bool | None, str]:
    """Return (whether ``text`` starts with ``ip:``, in any case, what follows) for an address.

    ``(None, text)`` when ``text`` names no address nor network: neither
    ``ip:...`` nor an address (``10.1.2.3``, ``10.1.2.3:80``, ``[::1]:80``)
    or what looks like a network of one (``10.1.2.0/24``, ``10.0.0.0/33``).
    """
    if text[:3].lower() == "ip:":
        return True, text[3:]
    if normalize_address(text.partition("/")[0]) is not None:
        return False, text
    return None, text


def _address_target(text: str, form: AddressForm | None, policy: str | None) -> str:
    """Return :func:`normalize_target` of an address, a network or ``ip:unknown``."""
    body = split_address(text)[1]
    if "/" in body:
        return _network_target(text, body, form, policy)
    if body.lower() == "unknown":
        return UNKNOWN_IP
    if form is None:
        raise TargetError(_no_addresses(text, policy))
    address = form.identity(body)
    if address is None:
        raise TargetError(f"{short_repr(text)}: ip: must be followed by an IPv4 or IPv6 address")
    return address


def _network_target(text: str, body: str, form: AddressForm | None, policy: str | None) -> str:
    try:
        network = ipaddress.ip_network(body, strict=False)
    except ValueError:
        raise TargetError(
            f"{short_repr(text)} is not an address network such as 203.0.113.0/24 or 2001:db8::/48"
        ) from None
    if form is None:
        raise TargetError(_no_addresses(text, policy))
    longest = form.prefix(network.version)
    if network.prefixlen > longest:
        kind = f"IPv{network.version}"
        if policy is None and form == DEFAULT_FORM:
            raise TargetError(
                f"{short_repr(text)}: {kind} clients are counted by their /{longest} network, "
                f"so an override can name networks of at most /{longest}"
            )
        wider = network.supernet(new_prefix=longest)
        setting = f"IPV{network.version}_PREFIX" if form.head == "ip:" else "its drop-in"
        raise TargetError(
            f"{short_repr(text)}: policy {policy!r} counts {kind} clients by their "
            f"/{longest} network ({setting}), so this network never holds a request's "
            f"identity: type {wider} (or a wider network), or one address"
        )
    return f"ip:{network.with_prefixlen}"


def _no_addresses(text: str, policy: str | None) -> str:
    return (
        f"{short_repr(text)}: policy {policy!r} never counts requests by their address (its "
        "key is not ip, user_or_ip or anon): name an identity as its key gives it, such as "
        "user:42"
    )


@dataclass(frozen=True)
class Row:
    """An override as the database holds it (see ``models.Override``)."""

    id: int
    policy: str
    identity: str
    action: str
    rate: str
    expires_at: datetime


def build_rules(
    rows: Iterable[Row], address_form: Callable[[str], AddressForm | None] | None = None
) -> tuple[dict[str, PolicyRules], list[str]]:
    """Return the rules of ``rows`` by policy, and why any row was left out.

    ``address_form(policy)`` says how that policy's identities write
    addresses (default: as the ``ip`` key at the default prefixes); each
    target is compared as :func:`normalize_target` gives it under that form,
    so an address matches the identity requests from it have. A row that
    names no valid target or action for its policy (written past the
    admin's form, or the settings changed since) is left out; its reason
    names its id.
    """
    by_policy: dict[str, PolicyRules] = {}
    networks: dict[str, dict[tuple[int, int], dict[int, Rule]]] = {}
    forms: dict[str, AddressForm | None] = {}
    problems = []
    for row in rows:
        if row.policy not in forms:
            forms[row.policy] = DEFAULT_FORM if address_form is None else address_form(row.policy)
        form = forms[row.policy]
        if row.action == PERCENT:
            if not is_percent_text(row.rate):
                problems.append(f"override {row.id}: percent {row.rate!r} is not 0 to 100")
                continue
            percent = Rule(PERCENT, row.rate, _unix(row.expires_at), WHOLE_POLICY)
            by_policy.setdefault(row.policy, PolicyRules()).percent = percent
            continue
        try:
            target = normalize_target(row.identity, form, row.policy)
        except TargetError as exc:
            problems.append(f"override {row.id} of policy {row.policy!r}: {exc}")
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


def is_percent_text(text: str) -> bool:
    """Return whether ``text`` (a ``percent`` override's) is a number from 0 to 100."""
    try:
        value = float(text)
    except ValueError:
        return False
    return 0 <= value <= 100


def _unix(moment: datetime) -> float:
    # An aware datetime (USE_TZ) is exact; a naive one is local time, as
    # Django's naive datetimes are.
    return moment.timestamp()
