"""Helpers for a project's test suite (docs/testing.md).

* :func:`reset_rate_limits`: forget every rate limit (``setUp``, any runner);
* :func:`rate_limits_disabled`: every limit off while on;
* :func:`override_policy`: one policy decided by other keys, fresh state;
* :func:`exhaust`: an identity's limit used up now;
* :func:`assert_rate_limited`, :func:`assert_not_rate_limited`;
* the pytest fixture ``rate_limits_reset`` (also the plugin's, with
  ``rate_limits_disabled``: ``django_rl.testing.plugin``, registered by the
  ``pytest11`` entry point ``django_rl``).

``cache.clear()`` (a FLUSHDB through django-redis) empties Redis, but not
the processes' memory: this process's deny cache and outage fallback counts
would deny on; :func:`reset_rate_limits` clears both. Other processes (a
live server, workers) honour the reset within a second (the reset token,
``reset_epoch.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django_rl.backends import get_backend
from django_rl.conf import get_settings
from django_rl.policies import reset_epoch
from django_rl.policies.deny_cache import get_deny_cache
from django_rl.policies.fallback import get_fallback_store
from django_rl.testing.assertions import assert_not_rate_limited, assert_rate_limited
from django_rl.testing.limits import exhaust, override_policy, rate_limits_disabled

#: Keys deleted per round trip.
BATCH = 1_000


def reset_rate_limits() -> int:
    """Forget every rate limit: every key under ``KEY_PREFIX``, on every server of the connection.

    Under pytest-xdist with the plugin, only this worker's keys (each
    worker writes under its own prefix). Then writes a new reset token, so
    that every process's deny cache drops its denials within a second, and
    clears this process's deny cache and outage fallback counts at once.
    Keys of other apps are left alone. Return the keys deleted.

    :raises redis.exceptions.RedisError: if Redis cannot answer.
    """
    settings = get_settings()
    pattern = f"{settings.key_prefix}:*"
    deleted = 0
    for node in get_backend(settings.connection).nodes():
        batch: list[Any] = []
        for key in node.client.scan_iter(match=pattern, count=BATCH):
            batch.append(key)
            if len(batch) == BATCH:
                deleted += _delete(node.client, batch)
                batch = []
        if batch:
            deleted += _delete(node.client, batch)
    reset_epoch.bump()
    denials = get_deny_cache()
    if denials is not None:
        denials.clear()
    get_fallback_store().clear()
    return deleted


def _delete(client: Any, keys: list[Any]) -> int:
    # One DEL per key: on a Redis Cluster the keys of a batch are in many slots.
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.delete(key)
    return sum(int(n) for n in pipe.execute())


try:
    import pytest
except ImportError:  # pytest is not a dependency: the fixture only exists with it
    pass
else:

    @pytest.fixture
    def rate_limits_reset() -> Iterator[None]:
        """Forget every rate limit before the test, and after it."""
        reset_rate_limits()
        yield
        reset_rate_limits()


__all__ = [
    "assert_not_rate_limited",
    "assert_rate_limited",
    "exhaust",
    "override_policy",
    "rate_limits_disabled",
    "rate_limits_reset",
    "reset_rate_limits",
]
