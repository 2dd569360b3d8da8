"""The URLconf's views, walked once per URLconf: what the checks, the admin and the drop-ins read.

Inline policies (``inline.url_specs``), the drop-ins' policies
(``contrib/drf_policies.py``, ``contrib/ratelimit/discovery.py``) and the
checks (``checks.py``) all look at the views the URLconf routes to. The
admin asks on every poll, so :class:`PerURLconf` keeps what was found from
one URLconf until another is in force (``get_resolver`` is cached per
``ROOT_URLCONF``: a new resolver is a new URLconf).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from django.urls import URLPattern, URLResolver, get_resolver

T = TypeVar("T")


def walk(patterns: list[Any]) -> Iterator[URLPattern]:
    """Yield every URL pattern under ``patterns``, included URLconfs too."""
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from walk(pattern.url_patterns)
        elif isinstance(pattern, URLPattern):
            yield pattern


def url_patterns() -> list[URLPattern] | None:
    """Return every pattern of the URLconf in force, or ``None`` if it does not import.

    A URLconf that does not import is Django's own check's to report.
    """
    try:
        return list(walk(get_resolver().url_patterns))
    except Exception:
        return None


class PerURLconf(Generic[T]):
    """What ``compute(patterns)`` found in the URLconf in force, computed once per URLconf."""

    def __init__(self, compute: Callable[[list[URLPattern]], T]) -> None:
        self._compute = compute
        self._last: tuple[object, T] | None = None

    def forget(self) -> None:
        """Compute afresh at the next :meth:`get` (a test that changes views in place)."""
        self._last = None

    def get(self) -> T | None:
        """Return the value for the URLconf in force; ``None`` if it does not import.

        ``compute`` runs outside the guard: its own errors are its caller's.
        The value is shared between calls: callers copy what they hand out.
        """
        try:
            resolver = get_resolver()
            last = self._last
            if last is not None and last[0] is resolver:
                return last[1]
            patterns = list(walk(resolver.url_patterns))
        except Exception:
            return None
        value = self._compute(patterns)
        self._last = (resolver, value)
        return value
