"""Identity functions: who a request is counted as.

An identity function takes a request (a Django ``HttpRequest`` or a DRF
``Request``, which proxies it) and returns a string such as ``"ip:203.0.113.9"``
or ``"user:42"``, or ``None`` when the policy does not apply to that request.
Built-ins are named in a policy's ``key``:

* ``ip``: the client address (``REMOTE_ADDR``, or ``X-Forwarded-For`` when
  ``NUM_PROXIES`` says how many proxies to trust, or the ``request.META`` key
  or function ``IP_META_KEY`` names: see :class:`ClientAddress`), grouped by
  its network: ``IPV4_PREFIX`` bits of an IPv4 address (32: each address),
  ``IPV6_PREFIX`` of an IPv6 one (64, since one host usually owns a whole
  /64), except IPv6 addresses that stand for an IPv4 client (NAT64,
  IPv4-mapped; see ``addresses.py``).
* ``user``: ``user:<pk>`` for an authenticated user, else ``None``.
* ``user_or_ip``: ``user`` when authenticated, else ``ip`` (the default).
* ``anon``: ``ip`` for an anonymous request, ``None`` (the policy does not
  apply) for an authenticated user: DRF's ``AnonRateThrottle``.
* ``header:<Name>``: ``<name>:<value>`` of that request header.
* ``get:<name>``, ``post:<name>``: ``get:<name>:<value>`` of that query
  string parameter, ``post:<name>:<value>`` of that form field
  (``request.POST``); the last value when it is repeated.
* anything else is a dotted path to ``callable(request) -> str | None``.

A request without the header, parameter or field (or with it empty) is
counted under one identity shared by all such requests, the name with an
empty value (``x-api-key:``, ``get:page:``): never exempt, or a client
would escape the limit by leaving it out. Values come from clients: like
every identity, they are bounded in keys (a digest when long or unsafe, see
``keys.safe_identity``).
"""

from __future__ import annotations

import functools
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.utils.module_loading import import_string

from django_rl.core.addresses import normalize_address
from django_rl.core.dotted import import_callable
from django_rl.core.reprs import short_repr
from django_rl.exceptions import ConfigurationError

_inet_pton = socket.inet_pton
_AF_INET = socket.AF_INET

IdentityFunction = Callable[[Any], "str | None"]

#: The identity of clients whose address cannot be determined. They share one
#: bucket: safer than letting them through unlimited.
UNKNOWN_IP = "ip:unknown"

_HEADER_NAME = re.compile(r"[A-Za-z0-9-]{1,64}")
#: Names a ``get:`` or ``post:`` key may count by: ``page``, ``user.email``, ``ids[]``.
_FIELD_NAME = re.compile(r"[A-Za-z0-9._\[\]-]{1,64}")
_BUILTINS = ("ip", "user", "user_or_ip", "anon")
#: A request.META key, as ``IP_META_KEY`` names one (``HTTP_CF_CONNECTING_IP``).
META_KEY = re.compile(r"[A-Z][A-Z0-9_]{0,99}")


class IdentitySpecError(ValueError):
    """A policy's ``key`` names no identity function; the message says why."""


#: What a policy's ``key`` may be: the hint of ``django_rl.E011``, wherever it is raised.
KEY_HINT = (
    "Use 'ip', 'user', 'user_or_ip', 'anon', 'header:<Name>', 'get:<name>', "
    "'post:<name>', a callable(request) -> str | None, or the dotted path of one."
)


@dataclass(frozen=True)
class AddressSettings:
    """How the ``ip`` identity finds and groups a client's address.

    The settings ``NUM_PROXIES``, ``IP_META_KEY``, ``IPV4_PREFIX`` and
    ``IPV6_PREFIX`` (``conf.Settings.addresses``), already validated.
    ``meta_key`` is ``None``, a ``request.META`` key, the dotted path of a
    ``callable(request) -> str | None``, or such a callable.
    """

    num_proxies: int = 0
    meta_key: object = None
    ipv4_prefix: int = 32
    ipv6_prefix: int = 64


@dataclass(frozen=True)
class AddressForm:
    """How a policy's identities write a client's address: ``<head><address>``.

    The address is grouped into its network of ``ipv4_prefix`` or
    ``ipv6_prefix`` bits and written as the network's first address, as
    :func:`normalize_address` does: what the ``ip`` key gives a request
    (``ip:10.1.2.0`` for any client of ``10.1.2.0/24`` under ``IPV4_PREFIX``
    24). The drop-ins have their own (see ``inspection/targets.py``).
    """

    head: str = "ip:"
    ipv4_prefix: int = 32
    ipv6_prefix: int = 64

    def identity(self, address: str) -> str | None:
        """Return the identity of a request from ``address``, or ``None`` if it is not one.

        ``address`` as :func:`normalize_address` takes it: ``10.1.2.3``,
        ``10.1.2.3:8080``, ``2001:db8::1``, ``[2001:db8::1]:443``.
        """
        found = normalize_address(address, self.ipv4_prefix, self.ipv6_prefix)
        return None if found is None else self.head + found

    def prefix(self, version: int) -> int:
        """Return the network length addresses of IP ``version`` are grouped by."""
        return self.ipv4_prefix if version == 4 else self.ipv6_prefix


#: The built-in keys that count a request by its client's address (``anon``
#: and ``user_or_ip``: anonymous requests).
ADDRESS_KEYS = ("ip", "user_or_ip", "anon")
#: The built-in keys whose identities never hold an address.
_NO_ADDRESS_PREFIXES = ("header:", "get:", "post:")


def address_form(key: object, addresses: AddressSettings) -> AddressForm | None:
    """Return how the identities of a policy's ``key`` write addresses; ``None``: never.

    ``ip``, ``user_or_ip`` and ``anon`` write ``ip:`` and the address grouped
    by ``IPV4_PREFIX``/``IPV6_PREFIX``; ``user``, ``header:``, ``get:`` and
    ``post:`` never hold an address. A function of the project's may return
    anything: taken to write addresses as ``ip`` does (it may call
    :func:`client_ip`).
    """
    form = AddressForm("ip:", addresses.ipv4_prefix, addresses.ipv6_prefix)
    if not isinstance(key, str) or key in ADDRESS_KEYS:
        return form
    if key == "user" or key.startswith(_NO_ADDRESS_PREFIXES):
        return None
    return form


class ClientAddress:
    """The ``ip`` identity function under :class:`AddressSettings`: ``request -> "ip:<address>"``.

    The first of these that gives a well-formed address (see
    :func:`normalize_address`) counts:

    1. ``IP_META_KEY``: the value of that ``request.META`` key (e.g.
       ``HTTP_CF_CONNECTING_IP``, the header ``CF-Connecting-IP``), or what
       the function it names returns (``None``: it does not know);
    2. with ``NUM_PROXIES`` N > 0, the N-th entry from the right of
       ``X-Forwarded-For``;
    3. ``REMOTE_ADDR``;

    and else :data:`UNKNOWN_IP`. A missing or malformed value falls through
    to the next, so whatever a client writes there, it never becomes an
    identity of its own text, and never an error.

    :raises ConfigurationError: when built, if ``meta_key`` is a dotted path
        that does not import or is not callable (``django_rl.E080``).
    """

    __slots__ = (
        "_remote_only", "ipv4_prefix", "ipv6_prefix", "meta_function", "meta_key", "num_proxies"
    )  # fmt: skip

    def __init__(self, settings: AddressSettings) -> None:
        self.num_proxies = settings.num_proxies
        self.ipv4_prefix = settings.ipv4_prefix
        self.ipv6_prefix = settings.ipv6_prefix
        self.meta_key: str | None = None
        self.meta_function: Callable[[Any], object] | None = None
        meta = settings.meta_key
        if isinstance(meta, str) and "." in meta:
            self.meta_function = _import_meta_function(meta)
        elif isinstance(meta, str):
            self.meta_key = meta
        elif callable(meta):
            self.meta_function = meta
        #: Only ``REMOTE_ADDR`` counts (no ``IP_META_KEY``, no proxies): asked once, here.
        self._remote_only = (
            self.meta_key is None and self.meta_function is None and self.num_proxies <= 0
        )

    def ip(self, request: Any) -> str:
        """``ip``: ``ip:<address>`` of the client that sent ``request`` (see the class).

        The policies' ``identify`` is this bound method (or one of the two
        below), not the instance: a call of a bound method runs in the
        caller's interpreter loop, a call of an instance's ``__call__`` in a
        loop of its own (about 1 µs more, on every decision).
        """
        meta = request.META
        if not self._remote_only:
            found = self._before_remote(request, meta)
            if found is not None:
                return found
        address = meta.get("REMOTE_ADDR")
        if type(address) is str and self.ipv4_prefix == 32:
            # normalize_address's first case inline (a plain IPv4 address,
            # kept as it is written): this runs on nearly every request.
            known = _PLAIN_IPV4.get(address)
            if known is not None:
                return known
            try:
                _inet_pton(_AF_INET, address)
            except (OSError, ValueError):
                pass
            else:
                return _plain_ipv4(address)
        remote = normalize_address(str(address or ""), self.ipv4_prefix, self.ipv6_prefix)
        return f"ip:{remote}" if remote is not None else UNKNOWN_IP

    __call__ = ip

    def user_or_ip(self, request: Any) -> str:
        """``user_or_ip``: ``user:<pk>`` for an authenticated user, else :meth:`ip`."""
        return user_identity(request) or self.ip(request)

    def anon(self, request: Any) -> str | None:
        """``anon``: :meth:`ip` of an anonymous request; ``None`` for a user."""
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            return None
        return self.ip(request)

    def _before_remote(self, request: Any, meta: Any) -> str | None:
        """Return the address ``IP_META_KEY`` or ``X-Forwarded-For`` gives; ``None``: neither."""
        if self.meta_key is not None or self.meta_function is not None:
            found = self._from_meta_setting(request, meta)
            if found is not None:
                return found
        if self.num_proxies > 0:
            forwarded = meta.get("HTTP_X_FORWARDED_FOR", "")
            if forwarded:
                # rsplit bounds the work whatever the header's length.
                hops = forwarded.rsplit(",", self.num_proxies)
                candidate = normalize_address(
                    hops[-min(self.num_proxies, len(hops))], self.ipv4_prefix, self.ipv6_prefix
                )
                if candidate is not None:
                    return f"ip:{candidate}"
        return None

    def _from_meta_setting(self, request: Any, meta: Any) -> str | None:
        if self.meta_function is not None:
            value = self.meta_function(request)
            if value is not None and not isinstance(value, str):
                raise TypeError(
                    f"DJANGO_RL['IP_META_KEY'] function returned {type(value).__name__}; it "
                    "must return the client's address as a str (e.g. '203.0.113.9') or None"
                )
        else:
            value = meta.get(self.meta_key)
        if not isinstance(value, str):
            return None  # absent (or not text: nothing a client could have written)
        address = normalize_address(value, self.ipv4_prefix, self.ipv6_prefix)
        return None if address is None else f"ip:{address}"


def _import_meta_function(path: str) -> Callable[[Any], object]:
    try:
        function = import_string(path)
    except ImportError as exc:
        raise ConfigurationError(
            f"DJANGO_RL['IP_META_KEY'] {short_repr(path)} could not be imported: {exc}",
            check_id="django_rl.E080",
        ) from exc
    if not callable(function):
        raise ConfigurationError(
            f"DJANGO_RL['IP_META_KEY'] {short_repr(path)} is not callable",
            check_id="django_rl.E080",
        )
    result: Callable[[Any], object] = function
    return result


#: ``ip:<address>`` of the plain IPv4 addresses seen last (``REMOTE_ADDR``, each
#: whole): a client's next request gets the same string, its hash already
#: known to every dict the decision looks it up in (deny cache, overrides,
#: history). Bounded: emptied when full.
_PLAIN_IPV4: dict[str, str] = {}
_PLAIN_IPV4_SIZE = 1024


def _plain_ipv4(address: str) -> str:
    """Return ``ip:<address>`` of a plain IPv4 address (checked), kept in :data:`_PLAIN_IPV4`."""
    identity = "ip:" + address
    if len(_PLAIN_IPV4) >= _PLAIN_IPV4_SIZE:
        _PLAIN_IPV4.clear()
    _PLAIN_IPV4[address] = identity
    return identity


@functools.lru_cache(maxsize=64)
def _plain_address(num_proxies: int) -> ClientAddress:
    return ClientAddress(AddressSettings(num_proxies))


def client_ip(request: Any, num_proxies: int = 0) -> str:
    """Return ``ip:<address>`` for the client that sent ``request``, by the default rules.

    With ``num_proxies == 0`` only ``REMOTE_ADDR`` counts: a client can write
    any ``X-Forwarded-For`` it likes. With N trusted proxies in front, the
    N-th address from the right of ``X-Forwarded-For`` is the one the first
    trusted proxy saw. A missing or malformed address falls back to
    ``REMOTE_ADDR``, and then to :data:`UNKNOWN_IP`. IPv4 addresses count
    whole, IPv6 ones by their /64. (Policies follow the settings instead:
    ``IP_META_KEY`` and the prefixes too, see :class:`ClientAddress`.)
    """
    return _plain_address(num_proxies)(request)


def user_identity(request: Any) -> str | None:
    """Return ``user:<pk>`` for an authenticated user, else ``None``."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return None
    return f"user:{user.pk}"


def user_or_ip(request: Any, num_proxies: int = 0) -> str:
    """Return the user identity when authenticated, else the client IP."""
    return user_identity(request) or client_ip(request, num_proxies)


def header_identity(request: Any, header: str) -> str:
    """Return ``<header>:<value>`` (header name lower-cased); ``<header>:`` if absent or empty.

    Every request without the header shares ``<header>:``: leaving it out
    does not escape the limit.
    """
    value = request.headers.get(header)
    return f"{header.lower()}:{value or ''}"


def query_identity(request: Any, name: str) -> str:
    """Return ``get:<name>:<value>`` of query parameter ``name``; ``get:<name>:`` if none."""
    value = request.GET.get(name)
    return f"get:{name}:{value or ''}"


def form_identity(request: Any, name: str) -> str:
    """Return ``post:<name>:<value>`` of form field ``name``; ``post:<name>:`` if absent or empty.

    Reads ``request.POST`` (DRF's ``Request.POST`` on DRF views): form data
    only, so a JSON body counts as absent. A body Django or DRF cannot parse
    raises their own error (a 400), as it would when the view reads it.
    """
    value = request.POST.get(name)
    return f"post:{name}:{value or ''}"


_FIELDS: dict[str, tuple[Callable[..., str], str]] = {
    "get:": (query_identity, "query string parameter"),
    "post:": (form_identity, "form field"),
}


def resolve_identity(
    spec: object, *, num_proxies: int = 0, addresses: AddressSettings | None = None
) -> IdentityFunction:
    """Return the identity function a policy's ``key`` names.

    :param addresses: how ``ip``, ``user_or_ip`` and ``anon`` find the
        client's address; by default ``AddressSettings(num_proxies)``.
    :raises IdentitySpecError: for a name that is not a built-in, a
        ``header:``, ``get:`` or ``post:`` spec with a bad name, or a dotted
        path that does not import or is not callable.
    :raises ConfigurationError: if ``addresses.meta_key`` names a function
        that cannot be used (``django_rl.E080``) and the key needs it.
    """
    if not isinstance(spec, str) or not spec:
        raise IdentitySpecError(f"key must be a non-empty string, not {short_repr(spec)}")
    if spec in ("ip", "user_or_ip", "anon"):
        return _address_identity(spec, addresses or AddressSettings(num_proxies))
    if spec == "user":
        return user_identity
    if spec.startswith("header:"):
        name = spec.removeprefix("header:")
        if not _HEADER_NAME.fullmatch(name):
            raise IdentitySpecError(f"key {short_repr(spec)} does not name a valid header")
        return functools.partial(header_identity, header=name)
    for prefix, (read_field, what) in _FIELDS.items():
        if spec.startswith(prefix):
            name = spec.removeprefix(prefix)
            if not _FIELD_NAME.fullmatch(name):
                raise IdentitySpecError(
                    f"key {short_repr(spec)} does not name a valid {what} "
                    "(1 to 64 letters, digits, '.', '_', '-', '[' or ']')"
                )
            return functools.partial(read_field, name=name)
    if "." not in spec:
        raise IdentitySpecError(
            f"key {short_repr(spec)} is not one of {', '.join(_BUILTINS)}, 'header:<Name>', "
            "'get:<name>', 'post:<name>' or a dotted path to a callable"
        )
    function = import_callable(spec, f"key {short_repr(spec)}", IdentitySpecError)
    return checked_identity(function, spec)


@functools.lru_cache(maxsize=64)
def _address_identity(spec: str, addresses: AddressSettings) -> IdentityFunction:
    """Return the function of ``ip``, ``user_or_ip`` or ``anon`` under ``addresses``.

    One per (spec, settings): policies of the same key share it, so a
    request's policies decided together identify it once (``engine.py``).
    """
    address = ClientAddress(addresses)
    if spec == "ip":
        return address.ip
    if spec == "user_or_ip":
        return address.user_or_ip
    return address.anon


def checked_identity(function: Callable[[Any], object], name: str) -> IdentityFunction:
    """Wrap a user's identity function so a wrong return type is a clear error; keep it as
    ``written``, for the async path (``async_identities.aidentify``) to await an ``async def``."""

    @functools.wraps(function)
    def identity(request: Any) -> str | None:
        return checked_value(function(request), name)

    identity.written = (function, name)  # type: ignore[attr-defined]
    return identity


def checked_value(value: object, name: str) -> str | None:
    """Return a user's identity function's ``value``, or raise ``TypeError`` for a wrong type."""
    if value is None or isinstance(value, str):
        return value
    raise TypeError(
        f"identity function {name!r} returned {type(value).__name__}; "
        "it must return a str (e.g. 'tenant:42') or None"
    )
