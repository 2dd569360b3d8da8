"""Counting in a Django cache that is not django-redis, as django-ratelimit does.

``RATELIMIT_USE_CACHE`` may name any cache with the original: a
``LocMemCache`` in a project's test settings, a ``DummyCache`` to turn
counting off, memcached. So that such a project switches without touching
its settings, the drop-in counts in that cache the original's way (``add``,
then ``incr`` or ``get``: two calls, exact across processes only where the
cache's ``incr`` is atomic, as with the original) instead of refusing it.
A django-redis cache takes django_rl's way (``store.py``): one atomic round
trip, the admin's live counters. ``django_rl.W091`` says which one a
project gets.

Windows are aligned on this host's clock, as the Redis way aligns them on
the server's. A cache that fails (an exception from any call, or no count)
is a count that could not be made: ``core.get_usage`` then follows
``RATELIMIT_FAIL_OPEN``, as for a Redis that cannot answer.
"""

from __future__ import annotations

import math
import threading
import time

from django.core.cache import caches

from django_rl.conf import forget_on_change, get_settings
from django_rl.contrib.ratelimit import conf
from django_rl.core.rates import Rate

#: Seconds a count outlives its window in the cache, as the original's.
EXPIRATION_FUDGE = 5

_redis_aliases: dict[str, bool] = {}
_lock = threading.Lock()


def is_django_redis(alias: str) -> bool:
    """Return whether the cache ``alias`` is a django-redis cache (kept per alias).

    :raises InvalidCacheBackendError: if ``CACHES`` has no ``alias``.
    """
    known = _redis_aliases.get(alias)
    if known is None:
        from django_redis.cache import RedisCache

        known = isinstance(caches[alias], RedisCache)
        with _lock:
            _redis_aliases[alias] = known
    return known


def count(
    alias: str, group: str, methods: str, rate: Rate, value: str, increment: bool
) -> tuple[int, int] | None:
    """Count a call (``increment``) or read the count; ``(count, seconds left)`` or ``None``.

    ``None``: the cache failed (or gave no count). A ``DummyCache`` stores
    nothing, so every call is the first of its window (count 1, or 0 for a
    read), as with the original.
    """
    now_ms = time.time_ns() // 1_000_000
    window = now_ms // rate.period_ms
    left = math.ceil((rate.period_ms - now_ms % rate.period_ms) / 1000)
    key = _key(group, methods, rate, value, window)
    initial = 1 if increment else 0
    timeout = math.ceil(rate.period_ms / 1000) + EXPIRATION_FUDGE
    cache = caches[alias]
    try:
        if cache.add(key, initial, timeout):
            return initial, left
        if not increment:
            found = cache.get(key, initial)
        else:
            try:
                found = cache.incr(key)
            except ValueError:
                # Expired between add and incr: this call starts the count again.
                found = initial if cache.add(key, initial, timeout) else None
    except Exception:  # any cache's failure is a count not made, never a 500
        return None
    if found is None or found is False:
        return None
    return int(found), left


def _key(group: str, methods: str, rate: Rate, value: str, window: int) -> str:
    """Return the cache key of a count: a digest, short and safe for memcached."""
    hash_algorithm = conf.hash_algorithm()
    text = "\0".join((group, methods, str(rate), value, str(window)))
    digest = hash_algorithm(text.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{get_settings().key_prefix}:django-ratelimit:{digest}"


def _forget_aliases() -> None:
    with _lock:
        _redis_aliases.clear()


forget_on_change(_forget_aliases, "CACHES")


__all__ = ["EXPIRATION_FUDGE", "count", "is_django_redis"]
