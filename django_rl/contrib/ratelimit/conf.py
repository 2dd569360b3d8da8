"""The drop-in's settings: django-ratelimit's ``RATELIMIT_*``, read lazily, again on change.

Read once and kept until Django sends ``setting_changed`` (``override_settings``,
pytest-django's ``settings``), as ``django_rl.conf`` reads ``DJANGO_RL``: a
decision reads them several times, and a settings attribute costs a
microsecond or two each time. They affect only the drop-in.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string


@dataclass(frozen=True)
class RatelimitSettings:
    """The ``RATELIMIT_*`` settings the drop-in reads, with the original's defaults."""

    enable: bool
    use_cache: str
    fail_open: bool
    ip_meta_key: object
    ipv4_mask: int
    ipv6_mask: int
    #: ``hashlib.sha256`` or the like: ``hash_algorithm(bytes).hexdigest()``.
    hash_algorithm: Any


@functools.cache
def get_ratelimit_settings() -> RatelimitSettings:
    """Return the ``RATELIMIT_*`` settings now in force."""
    return RatelimitSettings(
        enable=bool(getattr(settings, "RATELIMIT_ENABLE", True)),
        use_cache=getattr(settings, "RATELIMIT_USE_CACHE", "default"),
        fail_open=bool(getattr(settings, "RATELIMIT_FAIL_OPEN", False)),
        ip_meta_key=getattr(settings, "RATELIMIT_IP_META_KEY", None),
        ipv4_mask=getattr(settings, "RATELIMIT_IPV4_MASK", 32),
        ipv6_mask=getattr(settings, "RATELIMIT_IPV6_MASK", 64),
        hash_algorithm=_hash_algorithm(getattr(settings, "RATELIMIT_HASH_ALGORITHM", None)),
    )


def _hash_algorithm(chosen: object) -> Any:
    """Return the hash ``RATELIMIT_HASH_ALGORITHM`` names: a callable, or its dotted path."""
    if chosen is None:
        return hashlib.sha256
    return import_string(chosen) if isinstance(chosen, str) else chosen


@receiver(setting_changed)
def _forget_settings(*, setting: str, **kwargs: object) -> None:
    if setting.startswith("RATELIMIT_"):
        get_ratelimit_settings.cache_clear()
