"""The drop-in's groups on the URLconf's views, so that every process knows their policies.

A process that never ran a view (the admin's, ``manage.py ratelimit``)
still lists and resets the state ``@ratelimit`` leaves: each use notes its
group and methods on the view (``django_rl_ratelimit``), and this finds them
on the views the URLconf routes to, as ``inline.url_specs`` finds inline
policies. Their rates come from the rate catalogue (``store.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

#: What ``@ratelimit`` notes on a view: (group, or ``None`` for the group of
#: a method under ``method_decorator``, known per class; methods).
ATTRIBUTE = "django_rl_ratelimit"
#: The methods a class-based view's handlers may be named after.
_HANDLERS = ("get", "post", "put", "patch", "delete", "head", "options", "trace")


def _uses(callback: Any) -> Iterator[tuple[str, str]]:
    for group, methods in getattr(callback, ATTRIBUTE, ()):
        if group is not None:
            yield group, methods
    view = getattr(callback, "view_class", None)
    if view is None:
        return
    for name in _HANDLERS:
        handler: Any = getattr(view, name, None)
        for group, methods in getattr(handler, ATTRIBUTE, ()):
            # method_decorator's group: the module, the class, the method's qualname.
            yield group or f"{view.__module__}.{view.__name__}.{handler.__qualname__}", methods


def url_groups() -> set[tuple[str, str]]:
    """Return the (group, methods) of every ``@ratelimit`` on the URLconf's views.

    A URLconf that does not import is Django's own check's to report: none then.
    """
    from django.urls import URLPattern, URLResolver, get_resolver

    def walk(patterns: list[Any]) -> Iterator[URLPattern]:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns)
            elif isinstance(pattern, URLPattern):
                yield pattern

    global _walked
    try:
        resolver = get_resolver()
        if _walked is not None and _walked[0] is resolver:
            return set(_walked[1])
        found = {use for pattern in walk(resolver.url_patterns) for use in _uses(pattern.callback)}
    except Exception:
        return set()
    _walked = (resolver, found)  # the admin asks on every poll: walk each URLconf once
    return set(found)


_walked: tuple[object, set[tuple[str, str]]] | None = None
