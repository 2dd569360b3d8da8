"""``@ratelimit``: django-ratelimit's decorator, deciding through django_rl."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

from django.conf import settings
from django.utils.module_loading import import_string

from django_rl.contrib.ratelimit import ALL, UNSAFE
from django_rl.contrib.ratelimit.core import _methods_text, group_of, is_ratelimited
from django_rl.contrib.ratelimit.discovery import ATTRIBUTE
from django_rl.contrib.ratelimit.exceptions import Ratelimited

__all__ = ["ratelimit"]

V = TypeVar("V", bound=Callable[..., Any])


def ratelimit(
    group: str | None = None,
    key: Any = None,
    rate: Any = None,
    method: Any = ALL,
    block: bool = True,
) -> Callable[[V], V]:
    """Count every request to the view (of ``method``) and refuse those over ``rate``.

    Arguments as :func:`~django_rl.contrib.ratelimit.core.get_usage`'s. Each
    request sets ``request.limited`` (True once any ``@ratelimit`` on the
    view found it over its limit, so stacked decorators never set it back).
    Over the limit with ``block=True`` (the default), the view does not run:
    ``RATELIMIT_EXCEPTION_CLASS`` (a class or its dotted path; default
    :class:`Ratelimited`, a ``PermissionDenied``: 403) is raised.

    On class-based views, use ``method_decorator``; a view returned by
    ``as_view()`` can be wrapped too.
    """

    def decorator(fn: V) -> V:
        @functools.wraps(fn)
        def _wrapped(request: Any, *args: Any, **kwargs: Any) -> Any:
            old_limited = getattr(request, "limited", False)
            limited = is_ratelimited(
                request=request,
                group=group,
                fn=fn,
                key=key,
                rate=rate,
                method=method,
                increment=True,
            )
            request.limited = limited or old_limited
            if limited and block:
                raise _exception_class()()
            return fn(request, *args, **kwargs)

        # Noted for the admin and manage.py ratelimit of other processes
        # (discovery.py); method_decorator's stand-in knows no class yet.
        stand_in = fn.__module__ == "django.utils.decorators" and fn.__name__ == "dummy"
        use = (group if group is not None or stand_in else group_of(fn), _methods_text(method))
        setattr(_wrapped, ATTRIBUTE, (*getattr(fn, ATTRIBUTE, ()), use))
        return cast(V, _wrapped)

    return decorator


def _exception_class() -> type[Exception]:
    chosen = getattr(settings, "RATELIMIT_EXCEPTION_CLASS", Ratelimited)
    found: type[Exception] = import_string(chosen) if isinstance(chosen, str) else chosen
    return found


ratelimit.ALL = ALL  # type: ignore[attr-defined]
ratelimit.UNSAFE = UNSAFE  # type: ignore[attr-defined]
