"""``manage.py check`` for the django-ratelimit drop-in: where its counts live.

``django_rl.E091``: ``RATELIMIT_USE_CACHE`` names no cache of ``CACHES``
(every counted call would raise ``InvalidCacheBackendError``).
``django_rl.W091``: it names a cache that is not django-redis, so the
drop-in counts there as django-ratelimit does (``ratelimit/django_cache.py``),
not in Redis: two calls a decision, exact across processes only where the
cache's ``incr`` is atomic, and no live counters in the admin. Both only
when the project sets ``RATELIMIT_USE_CACHE`` or imported the drop-in.
Imports nothing of the drop-in.
"""

from __future__ import annotations

import sys
from typing import Any

from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.utils.module_loading import import_string

from django_rl.checks.names import DJANGO_REDIS_BACKEND, SETTINGS_TAG
from django_rl.core.reprs import short_repr


@register(SETTINGS_TAG)
def check_ratelimit_cache(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Report a ``RATELIMIT_USE_CACHE`` that names no cache, or one that is not django-redis."""
    chosen = getattr(django_settings, "RATELIMIT_USE_CACHE", None)
    if chosen is None and "django_rl.contrib.ratelimit" not in sys.modules:
        return []  # the drop-in is not in use
    alias = "default" if chosen is None else chosen
    caches = getattr(django_settings, "CACHES", {}) or {}
    config = caches.get(alias) if isinstance(alias, str) else None
    if not isinstance(config, dict):
        return [
            Error(
                f"RATELIMIT_USE_CACHE is {short_repr(alias)}, which CACHES does not name",
                hint="Name a django-redis cache of CACHES (the django-ratelimit drop-in "
                "counts in it), or leave RATELIMIT_USE_CACHE unset for 'default'.",
                id="django_rl.E091",
            )
        ]
    if _is_django_redis(config.get("BACKEND")):
        return []
    return [
        Warning(
            f"RATELIMIT_USE_CACHE names CACHES[{alias!r}], which is not a django-redis cache "
            f"({config.get('BACKEND')!r}): the django-ratelimit drop-in counts in it as "
            "django-ratelimit does, not in Redis.",
            hint="Counts there take two calls a decision, are exact across processes only "
            "where the cache's incr is atomic, and are not in the admin's live counters. For "
            f"django_rl's counting, point it at a cache with BACKEND {DJANGO_REDIS_BACKEND!r}; "
            "in test settings, silence django_rl.W091.",
            id="django_rl.W091",
        )
    ]


def _is_django_redis(backend: object) -> bool:
    """Return whether ``backend`` (a dotted path) is django-redis' cache or a subclass of it."""
    if backend == DJANGO_REDIS_BACKEND:
        return True
    if not isinstance(backend, str):
        return False
    try:
        from django_redis.cache import RedisCache

        found = import_string(backend)
    except ImportError:
        return False  # Django's own cache check reports a backend that does not import
    return isinstance(found, type) and issubclass(found, RedisCache)
