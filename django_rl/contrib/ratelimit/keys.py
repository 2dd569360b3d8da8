"""django-ratelimit's keys: what a request is counted as (``ip``, ``user``, ``header:x``, ...).

A key gives a *value*, a string; requests with the same value (in one
group, at one rate, for one set of methods) share a count. Values are not
namespaced by key, as in the original: ``get:q`` and ``post:q`` on one view
count the same query together. A missing header, parameter or field is the
empty string: one bucket for all such requests.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from django_rl.contrib.ratelimit import conf
from django_rl.docs_urls import doc_url

#: ``key(group, request) -> value``: a callable key, or the one a dotted path names.
KeyFunction = Callable[[str, Any], object]


def _get_ip(request: Any) -> str:
    """Return the client's address, masked by ``RATELIMIT_IPV4_MASK`` / ``RATELIMIT_IPV6_MASK``.

    Read from ``RATELIMIT_IP_META_KEY``: ``None`` (the default) for
    ``REMOTE_ADDR``; a callable, or a dotted path to one, called with the
    request; any other string, a ``request.META`` key. The address is the
    first of its network: ``10.1.0.0`` for ``10.1.2.3`` under a mask of 16
    (default 32: the whole address; IPv6: 64).

    :raises ImproperlyConfigured: if ``REMOTE_ADDR`` is empty (a proxy over a
        Unix socket), or ``RATELIMIT_IP_META_KEY`` names a META key the
        request does not have.
    :raises ValueError: if the value is not an IP address.
    """
    meta_key = conf.ip_meta_key()
    if not meta_key:
        address = request.META["REMOTE_ADDR"]
        if not address:
            raise ImproperlyConfigured(
                "IP address in REMOTE_ADDR is empty. This can happen when using a reverse "
                "proxy and connecting to the app server with Unix sockets. Set "
                "RATELIMIT_IP_META_KEY to where the client's address is "
                f"(see {doc_url('migrating', 'from-django-ratelimit')})."
            )
    elif callable(meta_key):
        address = meta_key(request)
    elif isinstance(meta_key, str) and "." in meta_key:
        address = import_string(meta_key)(request)
    elif meta_key in request.META:
        address = request.META[meta_key]
    else:
        raise ImproperlyConfigured(
            f"Could not get IP address from {meta_key!r}: RATELIMIT_IP_META_KEY names no "
            "request.META key of this request"
        )
    address = str(address)
    if ":" in address:
        mask = conf.ipv6_mask()
    else:
        mask = conf.ipv4_mask()
        if mask == 32:
            try:
                # A whole IPv4 address is itself: inet_pton checks it in a
                # tenth of ipaddress's time (and accepts the same forms).
                socket.inet_pton(socket.AF_INET, address)
                return address
            except OSError:
                pass  # ipaddress says what is wrong with it
    return str(ipaddress.ip_network(f"{address}/{mask}", strict=False).network_address)


def user_or_ip(request: Any) -> str:
    """Return the user's primary key when authenticated, else :func:`_get_ip`."""
    if request.user.is_authenticated:
        return str(request.user.pk)
    return _get_ip(request)


def _user(request: Any) -> str:
    # As the original: an anonymous user's pk is None, so all share "None".
    return str(request.user.pk)


#: The keys that are a name alone.
_SIMPLE_KEYS: dict[str, Callable[[Any], str]] = {
    "ip": _get_ip,
    "user": _user,
    "user_or_ip": user_or_ip,
}


def get_header(request: Any, header: str) -> str:
    """Return the value of request header ``header`` (``x-real-ip``), or ``""``."""
    return str(request.META.get("HTTP_" + header.replace("-", "_").upper(), ""))


def _get(request: Any, name: str) -> str:
    return str(request.GET.get(name, ""))


def _post(request: Any, name: str) -> str:
    return str(request.POST.get(name, ""))


#: The keys ``<accessor>:<name>``.
_ACCESSOR_KEYS: dict[str, Callable[[Any, str], str]] = {
    "get": _get,
    "post": _post,
    "header": get_header,
}


def _user_or_ip_identity(request: Any) -> str:
    if request.user.is_authenticated:
        return f"user:{request.user.pk}"
    return f"ip:{_get_ip(request)}"


#: The identities of the keys that are a name alone: their values, named as
#: django_rl's own identities name them.
_IDENTITIES: dict[str, Callable[[Any], str]] = {
    "ip": lambda request: f"ip:{_get_ip(request)}",
    "user": lambda request: f"user:{_user(request)}",
    "user_or_ip": _user_or_ip_identity,
}


def counted_as(group: str, request: Any, key: object) -> str:
    """Return the identity ``request`` is counted as within ``group``: its key's value.

    The values of ``ip``, ``user`` and ``user_or_ip`` as django_rl's own
    identities write them (``ip:203.0.113.9``, ``user:42``), so overrides set
    in the admin name them alike (an address, a network, a user); any other
    value (a header, a parameter, a form field such as a username, a
    callable's) as its digest by ``RATELIMIT_HASH_ALGORITHM`` (``h:<hex>``),
    so what clients send never stands in Redis keys, as the original's keys
    hash it. Equal values of the same kind give equal identities.
    """
    if isinstance(key, str):
        identity = _IDENTITIES.get(key)
        if identity is not None:
            return identity(request)
    value = key_value(group, request, key)
    hashed = conf.hash_algorithm()(value.encode("utf-8", "surrogateescape"))
    return f"h:{hashed.hexdigest()}"


def key_value(group: str, request: Any, key: object) -> str:
    """Return the value ``key`` gives ``request``: what it is counted as within ``group``.

    ``key`` is a callable ``(group, request)``, a name of :data:`_SIMPLE_KEYS`,
    ``<get|post|header>:<name>``, or a dotted path to a callable.

    :raises ImproperlyConfigured: for no key, or one that is none of those.
    """
    if not key:
        raise ImproperlyConfigured("Ratelimit key must be specified")
    if callable(key):
        value = key(group, request)
    elif not isinstance(key, str):
        raise ImproperlyConfigured(f"Could not understand ratelimit key: {key!r}")
    elif key in _SIMPLE_KEYS:
        return _SIMPLE_KEYS[key](request)
    elif ":" in key:
        accessor, name = key.split(":", 1)
        if accessor not in _ACCESSOR_KEYS:
            raise ImproperlyConfigured(f"Unknown ratelimit key: {key}")
        return _ACCESSOR_KEYS[accessor](request, name)
    elif "." in key:
        value = import_string(key)(group, request)
    else:
        raise ImproperlyConfigured(f"Could not understand ratelimit key: {key}")
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return str(value)
