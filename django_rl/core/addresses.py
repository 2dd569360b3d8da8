"""Addresses as clients' requests carry them: read, checked, grouped into networks.

:func:`normalize_address` turns one ``X-Forwarded-For`` entry (or a
``REMOTE_ADDR``) into the address a policy counts, or ``None`` for text
that is not one: the identities (``identities.ClientAddress``), the
overrides' and the admin's address targets, and the drop-ins' logs all
read addresses through it, so a client is counted as the same address
wherever it is named.
"""

from __future__ import annotations

import ipaddress
import re
import socket

_PORT = re.compile(r"[0-9]{1,5}")
#: The first 96 bits (as ints) of the IPv6 ranges whose last 32 bits are an
#: IPv4 address: IPv4-compatible ``::/96``, IPv4-mapped ``::ffff:0:0/96`` and
#: the NAT64 well-known prefix ``64:ff9b::/96``.
_EMBEDS_IPV4 = frozenset({0, 0xFFFF, int(ipaddress.IPv6Address("64:ff9b::")) >> 32})
#: The first 48 bits of the NAT64 local-use prefix ``64:ff9b:1::/48``.
_NAT64_LOCAL_USE = int(ipaddress.IPv6Address("64:ff9b:1::")) >> 80


def normalize_address(text: str, ipv4_prefix: int = 32, ipv6_prefix: int = 64) -> str | None:
    """Return the address in one ``X-Forwarded-For`` entry (or ``REMOTE_ADDR``), or ``None``.

    Well-formed, once surrounding spaces are trimmed: a bare IPv4 or IPv6
    address, ``v4:port``, ``[v6]`` or ``[v6]:port``, with a port of 1 to 5
    ASCII digits from 0 to 65535. Anything else is malformed (``None``), so
    the caller falls back rather than count a client under text it wrote.
    The address is grouped into its network of ``ipv4_prefix`` (IPv4) or
    ``ipv6_prefix`` (IPv6) bits, written as the network's first address;
    IPv6 addresses become what :func:`_ipv6_identity` says.
    """
    text = text.strip()
    try:
        # The common case first, a plain IPv4 address: ``ipaddress`` costs a
        # few µs a request, ``inet_pton`` a tenth of that. It accepts exactly
        # the dotted quads ``ipaddress`` accepts (no leading zeros, no short
        # forms), which are then already written the way it writes them.
        packed = socket.inet_pton(socket.AF_INET, text)
    except (OSError, ValueError):
        pass
    else:
        if ipv4_prefix == 32:
            return text
        return _ipv4_network(int.from_bytes(packed, "big"), ipv4_prefix)
    host, version = _split_port(text)
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if version and address.version != version:
        return None  # "[1.2.3.4]": brackets are for IPv6 only
    if isinstance(address, ipaddress.IPv6Address):
        return _ipv6_identity(address, ipv4_prefix, ipv6_prefix)
    return _ipv4_network(int(address), ipv4_prefix)


def _ipv4_network(value: int, prefix: int) -> str:
    """Return the first address of the ``prefix``-bit network of IPv4 address ``value``."""
    host_bits = 32 - prefix
    # inet_ntoa writes it as ipaddress does, in a tenth of the time.
    return socket.inet_ntoa((value >> host_bits << host_bits).to_bytes(4, "big"))


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


def _ipv6_identity(
    address: ipaddress.IPv6Address, ipv4_prefix: int = 32, ipv6_prefix: int = 64
) -> str:
    """Return the identity value of an IPv6 client: its network, or the IPv4 it stands for.

    * IPv4 embedded in the last 32 bits, by a translator or the old
      conventions: IPv4-mapped ``::ffff:0:0/96``, the NAT64 well-known prefix
      ``64:ff9b::/96`` (RFC 6052) and the deprecated IPv4-compatible
      ``::/96`` (but ``::`` and ``::1``, which are not IPv4 clients): the IPv4
      address (its ``ipv4_prefix`` network), so clients behind a translator
      keep a bucket each.
    * The NAT64 local-use prefix ``64:ff9b:1::/48`` (RFC 8215): where the
      IPv4 address sits depends on the prefix length the operator chose
      (/48 to /96), which this cannot know; the whole address, which the
      translator derives from one IPv4 address, so each still has its own.
    * Any other: its ``ipv6_prefix`` network (/64 by default, since one host
      usually owns a whole /64).

    A zone id (``fe80::1%eth0``) is dropped in every case.
    """
    value = int(address)
    high = value >> 32
    if high in _EMBEDS_IPV4 and (high or value > 1):
        return _ipv4_network(value & 0xFFFF_FFFF, ipv4_prefix)
    if value >> 80 == _NAT64_LOCAL_USE:
        return str(ipaddress.IPv6Address(value))
    host_bits = 128 - ipv6_prefix
    return str(ipaddress.IPv6Address(value >> host_bits << host_bits))
