"""``manage.py check``: a DRF view that names policies no throttle of it reads (``django_rl.W052``).

``throttle_scope`` and ``throttle_policies`` name django_rl policies only for
``PolicyThrottle`` (or a subclass). Without it among the view's throttles
the names are read by nothing and the view is not limited by them, silently:
no error, no header. ``throttle_scope`` is also DRF's own attribute, read by
a ``ScopedRateThrottle`` (DRF's, the drop-in's, or any throttle whose
``scope_attr`` is ``"throttle_scope"``): with one, the scope limits the
view as DRF means it, and only ``throttle_policies`` would go unread.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.checks import CheckMessage, Warning, register

from django_rl.checks.names import SETTINGS_TAG
from django_rl.checks.validation import Problem
from django_rl.core.reprs import short_repr
from django_rl.core.urlconf import url_patterns
from django_rl.docs_urls import doc_url

THROTTLE = "django_rl.throttling.PolicyThrottle"


def unread_policy_names() -> list[Problem]:
    """Return a warning for each DRF view of the URLconf whose named policies nothing reads.

    A view is judged by the throttles DRF would make for it: its
    ``throttle_classes`` (those of ``as_view()``'s or a router's keyword
    arguments first), or, where it keeps ``APIView``'s,
    ``DEFAULT_THROTTLE_CLASSES`` as the settings say now. A view that makes
    its own throttles (overrides ``get_throttles``) is not judged.
    """
    patterns = url_patterns()
    if patterns is None:
        return []
    try:
        from rest_framework.settings import api_settings
        from rest_framework.views import APIView

        from django_rl.throttling import PolicyThrottle
    except ImportError:  # DRF is not installed: no DRF view
        return []
    problems: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    for pattern in patterns:
        callback = pattern.callback
        view = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
        if not (isinstance(view, type) and issubclass(view, APIView)):
            continue
        if view.get_throttles is not APIView.get_throttles:
            continue
        given = _initkwargs(callback)
        classes = given.get("throttle_classes", view.throttle_classes)
        if classes is APIView.throttle_classes:
            try:
                classes = api_settings.DEFAULT_THROTTLE_CLASSES
            except ImportError:
                continue  # a path that does not import: DRF's error, met at the first request
        classes = [c for c in classes or () if isinstance(c, type)]
        if any(issubclass(c, PolicyThrottle) for c in classes):
            continue
        unread = _unread(given, view, classes)
        where = pattern.lookup_str
        if not unread or (where, str(unread)) in seen:
            continue
        seen.add((where, str(unread)))
        one = sum(len(names) for names in unread.values()) == 1
        named = "; ".join(f"{attr} {', '.join(names)}" for attr, names in unread.items())
        what = "a rate-limit policy" if one else "rate-limit policies"
        problems.append(
            Problem(
                "django_rl.W052",
                f"DRF view {where!r} names {what} ({named}), but PolicyThrottle is not "
                f"among its throttles: nothing limits the view by {'it' if one else 'them'}",
                f"Add {THROTTLE!r} to REST_FRAMEWORK['DEFAULT_THROTTLE_CLASSES'] or to the "
                f"view's throttle_classes, or remove the names. See {doc_url('checks')}",
            )
        )
    return problems


def _initkwargs(callback: Any) -> Mapping[str, Any]:
    """Return the keyword arguments ``as_view()`` (or a router) gave the view."""
    for name in ("initkwargs", "view_initkwargs"):
        given = getattr(callback, name, None)
        if isinstance(given, Mapping):
            return given
    return {}


def _unread(given: Mapping[str, Any], view: type, classes: list[type]) -> dict[str, list[str]]:
    """Return the names of the view's policies that none of ``classes`` reads, by attribute."""
    unread: dict[str, list[str]] = {}
    scope = given.get("throttle_scope", getattr(view, "throttle_scope", None))
    scoped = any(getattr(c, "scope_attr", None) == "throttle_scope" for c in classes)
    if isinstance(scope, str) and scope and not scoped:
        unread["throttle_scope"] = [short_repr(scope)]
    more = given.get("throttle_policies", getattr(view, "throttle_policies", ()))
    if isinstance(more, str):
        more = [more]  # a bare string, still a name meant (E052 where it is read)
    if isinstance(more, (list, tuple)):
        names = [short_repr(name) for name in more if isinstance(name, str) and name]
        if names:
            unread["throttle_policies"] = names
    return unread


@register(SETTINGS_TAG)
def check_drf_views(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Report the DRF views of the URLconf whose named policies nothing reads (W052)."""
    return [Warning(p.msg, hint=p.hint, id=p.id) for p in unread_policy_names()]
