"""``DJANGO_RL["EXEMPT"]``: requests no front door limits, and that cost no round trip.

``EXEMPT`` is a list of CIDR networks (``"10.0.0.0/8"``, ``"2001:db8::/32"``,
a bare address for one host), or one ``callable(request) -> bool`` (or its
dotted path). A request is exempt when its client address is inside one of
the networks, or when the callable returns ``True``.

The client address is the one the ``ip`` key counts by (``NUM_PROXIES``,
``IP_META_KEY``; ``core/identities.ClientAddress``), taken whole (not grouped
by ``IPV4_PREFIX``/``IPV6_PREFIX``): a proxy inside an exempt network does not
exempt the clients it forwards, and an IPv4 client behind a translator
(IPv4-mapped, NAT64) is matched as its IPv4 address.

Decided once per request (the answer is kept on the Django request, which a
DRF ``Request`` wraps), by :data:`EXEMPTIONS` ``.exempts(request)``, which
the one decision path calls (``engine.Limit.decide``, ``engine.decide``),
as do the drop-ins' own entries and the middleware's rules. While ``EXEMPT``
is empty, the usual case, that costs the front doors one attribute test
(``EXEMPTIONS.on``: ``False`` once the settings are read and ``EXEMPT`` is
empty).

Never a 500: an entry that is not a network, a dotted path that does not
import (``manage.py check`` reports both: ``django_rl.E100``) is left out
and logged once; a callable that raises or returns something else than a
``bool`` exempts nothing for that request, logged once per cause.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django_rl.conf import forget_on_change, get_settings
from django_rl.core.dotted import import_callable
from django_rl.core.identities import UNKNOWN_IP, AddressSettings, ClientAddress
from django_rl.core.reprs import short_repr
from django_rl.exceptions import ConfigurationError

logger = logging.getLogger("django_rl")

#: The Django request's attribute that keeps whether it is exempt.
ATTRIBUTE = "_django_rl_exempt"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Entry:
    """One entry of ``EXEMPT`` read: its network, or why it is not one."""

    network: Network | None
    problem: str | None


def parse_entry(value: object) -> Entry:
    """Return ``value`` (an entry of ``EXEMPT``'s list) as a network, or the problem with it.

    A CIDR string (``"10.0.0.0/8"``, ``"2001:db8::/48"``) or one address; a
    network with host bits set (``"10.0.0.1/8"``) is taken as its network.
    """
    if not isinstance(value, str):
        return Entry(None, f"is {short_repr(value)}, not a string")
    try:
        return Entry(ipaddress.ip_network(value.strip(), strict=False), None)
    except ValueError:
        return Entry(None, f"{short_repr(value)} is not an IPv4 or IPv6 network")


def is_callable_form(value: object) -> bool:
    """Return whether ``EXEMPT`` names a callable (a dotted path or one) rather than networks."""
    return callable(value) or isinstance(value, str)


class Matcher:
    """``EXEMPT`` compiled: ``matcher(request) -> bool``, never raising."""

    __slots__ = ("_address", "_function", "_v4", "_v6")

    def __init__(
        self,
        networks: Sequence[Network],
        function: Callable[[Any], object] | None,
        addresses: AddressSettings,
    ) -> None:
        self._function = function
        self._v4 = [(int(n.network_address), int(n.netmask)) for n in networks if n.version == 4]
        self._v6 = [(int(n.network_address), int(n.netmask)) for n in networks if n.version == 6]
        # The whole address (not grouped): a network narrower than the prefix still matches.
        self._address = ClientAddress(
            AddressSettings(addresses.num_proxies, addresses.meta_key, 32, 128)
        )

    def __call__(self, request: Any) -> bool:
        if self._function is not None:
            return self._call(request)
        try:
            identity = self._address(request)
        except Exception as exc:  # an IP_META_KEY function's error: not exempt
            _ERRORS.once(f": reading the client address raised {type(exc).__name__}", exc)
            return False
        if identity == UNKNOWN_IP:
            return False
        address = ipaddress.ip_address(identity[3:])  # "ip:<address>", well-formed
        value = int(address)
        networks = self._v4 if address.version == 4 else self._v6
        return any(value & mask == network for network, mask in networks)

    def _call(self, request: Any) -> bool:
        function = self._function
        assert function is not None
        try:
            answer = function(request)
        except Exception as exc:
            _ERRORS.once(f": its function raised {type(exc).__name__}", exc)
            return False
        if type(answer) is not bool:
            _ERRORS.once(f": its function returned {type(answer).__name__}, not a bool", None)
            return False
        return answer


class _Once:
    """Logs each cause of a broken ``EXEMPT`` once per process (bounded)."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def once(self, cause: str, exc: BaseException | None) -> None:
        with self._lock:
            if cause in self._seen or len(self._seen) >= 256:
                return
            self._seen.add(cause)
        logger.error(
            "DJANGO_RL['EXEMPT']: %s; the requests it meets are not exempt (run manage.py check)",
            cause,
            exc_info=exc,
        )

    def forget(self) -> None:
        with self._lock:
            self._seen.clear()


_ERRORS = _Once()


def compile_exempt(value: object, addresses: AddressSettings) -> Matcher | None:
    """Return ``EXEMPT`` compiled, or ``None`` when it exempts nothing (empty, or all broken)."""
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return None
    if is_callable_form(value):
        if callable(value):
            return Matcher((), value, addresses)
        try:
            function = import_callable(str(value), short_repr(value), ConfigurationError)
        except ConfigurationError as exc:
            _ERRORS.once(f": {exc}", None)
            return None
        return Matcher((), function, addresses)
    if not isinstance(value, (list, tuple)):
        _ERRORS.once(f" is {short_repr(value)}, not a list of networks or a callable", None)
        return None
    networks = []
    for index, item in enumerate(value):
        entry = parse_entry(item)
        if entry.network is None:
            _ERRORS.once(f"[{index}] {entry.problem}: left out", None)
        else:
            networks.append(entry.network)
    return Matcher(networks, None, addresses) if networks else None


class Exemptions:
    """Whether a request is exempt: ``EXEMPT`` compiled once, again after a settings change.

    :ivar on: ``False`` once the settings are read, nothing is exempt and no
        rule of ``RULES`` decides requests before their views (``site_rules.py``);
        the front doors test it before asking more (the usual path's one
        attribute test): :meth:`exempts`, and ``engine`` for a limit the
        middleware already decided.
    """

    __slots__ = ("_exempting", "_matcher", "_predeciding", "_read", "on")

    def __init__(self) -> None:
        self.on = True  # not read yet
        self._matcher: Matcher | None = None
        self._read = False
        self._exempting = False
        self._predeciding = False

    def predeciding(self, on: bool) -> None:
        """Say whether the middleware decides limits before views (``RULES`` is not empty)."""
        self._predeciding = on
        self.on = on or self._exempting or not self._read

    def exempts(self, request: Any) -> bool:
        """Return whether ``request`` is exempt; decided once per request (kept on it)."""
        http_request = getattr(request, "_request", request)
        own = getattr(http_request, "__dict__", None)
        if own is not None:
            known = own.get(ATTRIBUTE)
            if known is not None:
                return bool(known)
        matcher = self._matcher
        if matcher is None:
            if self._read:
                return False
            matcher = self._compile()
            if matcher is None:
                return False
        answer = matcher(request)
        if own is not None:
            own[ATTRIBUTE] = answer
        return answer

    def _compile(self) -> Matcher | None:
        try:
            settings = get_settings()
            matcher = compile_exempt(settings.exempt, settings.addresses)
        except ConfigurationError as exc:  # settings unusable: the decision path says so
            _ERRORS.once(f": not read, the settings are wrong: {exc}", None)
            return None
        self._matcher = matcher
        self._read = True
        self._exempting = matcher is not None
        self.on = self._exempting or self._predeciding
        return matcher

    def forget(self) -> None:
        """Read ``EXEMPT`` again on next use (the settings changed)."""
        self._matcher = None
        self._read = False
        self._exempting = False
        self._predeciding = False
        self.on = True
        _ERRORS.forget()


#: The process's one reader of ``EXEMPT``.
EXEMPTIONS = Exemptions()
forget_on_change(EXEMPTIONS.forget)

__all__ = ["EXEMPTIONS", "Entry", "Exemptions", "Matcher", "compile_exempt", "parse_entry"]
