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

from django_rl.core.urlconf import PerURLconf

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
    try:
        found = _GROUPS.get()
    except Exception:  # a view whose attributes cannot be read: none, as for a bad URLconf
        return set()
    return set() if found is None else set(found)


def _groups_of(patterns: list[Any]) -> set[tuple[str, str]]:
    return {use for pattern in patterns for use in _uses(pattern.callback)}


#: The admin asks on every poll: each URLconf is walked once.
_GROUPS = PerURLconf(_groups_of)
