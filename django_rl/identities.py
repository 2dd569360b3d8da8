"""Identity functions: who a request is counted as.

An identity function takes a request (a Django ``HttpRequest`` or a DRF
``Request``, which proxies it) and returns a string such as ``"ip:203.0.113.9"``
or ``"user:42"``, or ``None`` when the policy does not apply to that request.
Built-ins are named in a policy's ``key``:

* ``ip``: the client address (``REMOTE_ADDR``, or ``X-Forwarded-For`` when
  ``NUM_PROXIES`` says how many proxies to trust); IPv6 clients are grouped
  by their /64 network, since one host usually owns a whole /64, except
  addresses that stand for an IPv4 client (NAT64, IPv4-mapped; see
  :func:`_ipv6_identity`).
* ``user``: ``user:<pk>`` for an authenticated user, else ``None``.
* ``user_or_ip``: ``user`` when authenticated, else ``ip`` (the default).
* ``header:<Name>``: ``<name>:<value>`` of that request header, ``None`` when
  the header is absent or empty.
* anything else is a dotted path to ``callable(request) -> str | None``.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
from collections.abc import Callable
from typing import Any

from django.utils.module_loading import import_string

from django_rl.reprs import short_repr

IdentityFunction = Callable[[Any], "str | None"]

#: The identity of clients whose address cannot be determined. They share one
#: bucket: safer than letting them through unlimited.
UNKNOWN_IP = "ip:unknown"

_HEADER_NAME = re.compile(r"[A-Za-z0-9-]{1,64}")
_PORT = re.compile(r"[0-9]{1,5}")
#: The first 96 bits (as ints) of the IPv6 ranges whose last 32 bits are an
#: IPv4 address: IPv4-compatible ``::/96``, IPv4-mapped ``::ffff:0:0/96`` and
#: the NAT64 well-known prefix ``64:ff9b::/96``.
_EMBEDS_IPV4 = frozenset({0, 0xFFFF, int(ipaddress.IPv6Address("64:ff9b::")) >> 32})
#: The first 48 bits of the NAT64 local-use prefix ``64:ff9b:1::/48``.
_NAT64_LOCAL_USE = int(ipaddress.IPv6Address("64:ff9b:1::")) >> 80
_BUILTINS = ("ip", "user", "user_or_ip")


class IdentitySpecError(ValueError):
    """A policy's ``key`` names no identity function; the message says why."""


def _normalize_address(text: str) -> str | None:
    """Return the address in one ``X-Forwarded-For`` entry (or ``REMOTE_ADDR``), or ``None``.

    Well-formed, once surrounding spaces are trimmed: a bare IPv4 or IPv6
    address, ``v4:port``, ``[v6]`` or ``[v6]:port``, with a port of 1 to 5
    ASCII digits from 0 to 65535. Anything else is malformed (``None``), so
    the caller falls back rather than count a client under text it wrote.
    IPv6 addresses become what :func:`_ipv6_identity` says.
    """
    text = text.strip()
    try:
        # The common case first, a plain IPv4 address: ``ipaddress`` costs a
        # few µs a request, ``inet_pton`` a tenth of that. It accepts exactly
        # the dotted quads ``ipaddress`` accepts (no leading zeros, no short
        # forms), which are then already written the way it writes them.
        socket.inet_pton(socket.AF_INET, text)
        return text
    except (OSError, ValueError):
        pass
    host, version = _split_port(text)
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if version and address.version != version:
        return None  # "[1.2.3.4]": brackets are for IPv6 only
    if isinstance(address, ipaddress.IPv6Address):
        return _ipv6_identity(address)
    return str(address)


def _split_port(text: str) -> tuple[str, int]:
    """Return (the host part of ``text``, the IP version it must be, 0 for either).

    ``"[v6]:port"`` and ``"[v6]"`` give the part in brackets (version 6),
    ``"v4:port"`` (one colon) gives ``"v4"`` (version 4), anything else is
    taken whole. A bad port or anything after the bracket but ``:port``
    gives ``""``, which no address parses as.
    """
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if bracket and (not rest or (rest[0] == ":" and _is_port(rest[1:]))):
            return host, 6
        return "", 6
    host, colon, port = text.partition(":")
    if colon and ":" not in port:  # one colon: an IPv6 address has at least two
        return (host, 4) if _is_port(port) else ("", 4)
    return text, 0


def _is_port(text: str) -> bool:
    # ASCII digits only: str.isdigit() and int() also take other scripts' digits.
    return _PORT.fullmatch(text) is not None and int(text) <= 65_535


def _ipv6_identity(address: ipaddress.IPv6Address) -> str:
    """Return the identity value of an IPv6 client: its network, or the IPv4 it stands for.

    * IPv4 embedded in the last 32 bits, by a translator or the old
      conventions: IPv4-mapped ``::ffff:0:0/96``, the NAT64 well-known prefix
      ``64:ff9b::/96`` (RFC 6052) and the deprecated IPv4-compatible
      ``::/96`` (but ``::`` and ``::1``, which are not IPv4 clients): the IPv4
      address, so clients behind a translator keep a bucket each.
    * The NAT64 local-use prefix ``64:ff9b:1::/48`` (RFC 8215): where the
      IPv4 address sits depends on the prefix length the operator chose
      (/48 to /96), which this cannot know; the whole address, which the
      translator derives from one IPv4 address, so each still has its own.
    * Any other: its /64 network, since one host usually owns a whole /64.

    A zone id (``fe80::1%eth0``) is dropped in every case.
    """
    value = int(address)
    high = value >> 32
    if high in _EMBEDS_IPV4 and (high or value > 1):
        return str(ipaddress.IPv4Address(value & 0xFFFF_FFFF))
    if value >> 80 == _NAT64_LOCAL_USE:
        return str(ipaddress.IPv6Address(value))
    return str(ipaddress.IPv6Address(value >> 64 << 64))


def client_ip(request: Any, num_proxies: int = 0) -> str:
    """Return ``ip:<address>`` for the client that sent ``request``.

    With ``num_proxies == 0`` only ``REMOTE_ADDR`` counts: a client can write
    any ``X-Forwarded-For`` it likes. With N trusted proxies in front, the
    N-th address from the right of ``X-Forwarded-For`` is the one the first
    trusted proxy saw. A missing or malformed address falls back to
    ``REMOTE_ADDR``, and then to :data:`UNKNOWN_IP`.
    """
    meta = request.META
    if num_proxies > 0:
        forwarded = meta.get("HTTP_X_FORWARDED_FOR", "")
        if forwarded:
            # rsplit bounds the work whatever the header's length.
            hops = forwarded.rsplit(",", num_proxies)
            candidate = _normalize_address(hops[-min(num_proxies, len(hops))])
            if candidate is not None:
                return f"ip:{candidate}"
    remote = _normalize_address(str(meta.get("REMOTE_ADDR") or ""))
    return f"ip:{remote}" if remote is not None else UNKNOWN_IP


def user_identity(request: Any) -> str | None:
    """Return ``user:<pk>`` for an authenticated user, else ``None``."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return None
    return f"user:{user.pk}"


def user_or_ip(request: Any, num_proxies: int = 0) -> str:
    """Return the user identity when authenticated, else the client IP."""
    return user_identity(request) or client_ip(request, num_proxies)


def header_identity(request: Any, header: str) -> str | None:
    """Return ``<header>:<value>`` (header name lower-cased), ``None`` if absent or empty."""
    value = request.headers.get(header)
    if not value:
        return None
    return f"{header.lower()}:{value}"


def resolve_identity(spec: object, *, num_proxies: int = 0) -> IdentityFunction:
    """Return the identity function a policy's ``key`` names.

    :raises IdentitySpecError: for a name that is not a built-in, a
        ``header:`` spec with a bad header name, or a dotted path that does
        not import or is not callable.
    """
    if not isinstance(spec, str) or not spec:
        raise IdentitySpecError(f"key must be a non-empty string, not {short_repr(spec)}")
    if spec == "ip":
        return functools.partial(client_ip, num_proxies=num_proxies)
    if spec == "user":
        return user_identity
    if spec == "user_or_ip":
        return functools.partial(user_or_ip, num_proxies=num_proxies)
    if spec.startswith("header:"):
        name = spec.removeprefix("header:")
        if not _HEADER_NAME.fullmatch(name):
            raise IdentitySpecError(f"key {short_repr(spec)} does not name a valid header")
        return functools.partial(header_identity, header=name)
    if "." not in spec:
        raise IdentitySpecError(
            f"key {short_repr(spec)} is not one of {', '.join(_BUILTINS)}, 'header:<Name>' "
            "or a dotted path to a callable"
        )
    try:
        function = import_string(spec)
    except ImportError as exc:
        raise IdentitySpecError(f"key {short_repr(spec)} could not be imported: {exc}") from exc
    if not callable(function):
        raise IdentitySpecError(f"key {short_repr(spec)} is not callable")
    return checked_identity(function, spec)


def checked_identity(function: Callable[[Any], object], name: str) -> IdentityFunction:
    """Wrap a user's identity function so a wrong return type is a clear error."""

    @functools.wraps(function)
    def identity(request: Any) -> str | None:
        value = function(request)
        if value is None or isinstance(value, str):
            return value
        raise TypeError(
            f"identity function {name!r} returned {type(value).__name__}; "
            "it must return a str (e.g. 'tenant:42') or None"
        )

    return identity
