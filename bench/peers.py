"""The peers, each through its usual entry point, behind ``Limiter.build``'s signature.

DRF's ``AnonRateThrottle.allow_request`` (a ``SimpleRateThrottle``) and
django-ratelimit's ``is_ratelimited``, both on django-redis; limits' Redis
strategies' ``hit``; django-smart-ratelimit's Redis backend ``incr`` compared
with the limit (what its decorator does). All on the bench's redis-server,
with the same socket timeouts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

Decide = Callable[[int], bool]
Build = Callable[[int, Sequence[str]], Decide]


def requests_for(addresses: Sequence[str]) -> list[Any]:
    """Return a GET request from each address, built once, outside the timed calls."""
    from django.contrib.auth.models import AnonymousUser
    from django.test import RequestFactory

    factory = RequestFactory()
    requests = []
    for address in addresses:
        request = factory.get("/", REMOTE_ADDR=address)
        request.user = AnonymousUser()  # DRF's anonymous throttle asks
        requests.append(request)
    return requests


#: What a front door leaves on a request (its Decisions, ``limited``) and on
#: a response (that its headers are written). A bench's requests and
#: responses are built once, outside the timed calls: :func:`as_new` clears
#: these before each call, so that every call is a new request's, whose
#: response gets its headers (left on, a request's Decisions would pile up
#: call after call, and the headers be written of all of them).
LEFT_ON_REQUEST = ("django_rl_decisions", "limited")
LEFT_ON_RESPONSE = "_django_rl_headers_for"


def as_new(request: Any, response: Any = None) -> None:
    """Clear what an earlier call left on ``request`` and ``response`` (:data:`LEFT_ON_REQUEST`)."""
    state = request.__dict__
    for name in LEFT_ON_REQUEST:
        state.pop(name, None)
    if response is not None:
        response.__dict__.pop(LEFT_ON_RESPONSE, None)


def drf_throttle(limit: int, addresses: Sequence[str]) -> Decide:
    from rest_framework.throttling import AnonRateThrottle

    # A rate on the class, as DRF's docs show; scope names the cache key.
    throttle = type("Throttle", (AnonRateThrottle,), {"rate": f"{limit}/hour", "scope": "b"})
    requests = requests_for(addresses)
    return lambda i: bool(throttle().allow_request(requests[i], None))


def drf_dropin(limit: int, addresses: Sequence[str]) -> Decide:
    """The DRF drop-in, written as :func:`drf_throttle` (the module path is all that differs)."""
    from django_rl.contrib.drf import AnonRateThrottle

    throttle = type("Throttle", (AnonRateThrottle,), {"rate": f"{limit}/hour", "scope": "b"})
    requests = requests_for(addresses)
    return lambda i: bool(throttle().allow_request(requests[i], None))


def django_ratelimit(limit: int, addresses: Sequence[str]) -> Decide:
    from django_ratelimit.core import is_ratelimited

    requests = requests_for(addresses)
    rate = f"{limit}/h"
    return lambda i: not is_ratelimited(requests[i], group="b", key="ip", rate=rate, increment=True)


def limits_strategy(strategy: str) -> Build:
    def build(limit: int, addresses: Sequence[str]) -> Decide:
        from django.conf import settings
        from limits import parse, strategies
        from limits.storage import RedisStorage

        storage = RedisStorage(
            settings.REDIS_URL,
            socket_timeout=settings.SOCKET_TIMEOUT,
            socket_connect_timeout=settings.SOCKET_TIMEOUT,
        )
        limiter = getattr(strategies, strategy)(storage)
        item = parse(f"{limit}/hour")
        # The strategies would share keys in one namespace: give each its own.
        namespace = "".join(c for c in strategy if c.isupper())
        return lambda i: bool(limiter.hit(item, namespace, addresses[i]))

    return build


def smart_ratelimit(algorithm: str) -> Build:
    def build(limit: int, addresses: Sequence[str]) -> Decide:
        from django_smart_ratelimit.backends.redis_backend import RedisBackend

        backend = RedisBackend()
        backend.algorithm = algorithm
        # What its decorator does: count, then compare with the limit.
        keys = [f"{algorithm[0]}:{address}" for address in addresses]
        return lambda i: bool(backend.incr(keys[i], 3600) <= limit)

    return build
