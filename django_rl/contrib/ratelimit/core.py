"""``is_ratelimited`` and ``get_usage``, with django-ratelimit's arguments and answers.

Also the module-level helpers of the original's ``core`` that projects and
test suites import (``_split_rate``, ``_get_ip``, ``user_or_ip``,
``get_header``, ``_method_match``, ``_get_window``, ...), with the same
behaviour. The counting is ``store.py``'s: exact, one round trip.
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from django_rl.contrib.ratelimit import ALL, UNSAFE, conf, outage, store

# The original's helpers are importable from here, as from django_ratelimit.core.
from django_rl.contrib.ratelimit.keys import _ACCESSOR_KEYS as _ACCESSOR_KEYS
from django_rl.contrib.ratelimit.keys import _SIMPLE_KEYS as _SIMPLE_KEYS
from django_rl.contrib.ratelimit.keys import _get_ip as _get_ip
from django_rl.contrib.ratelimit.keys import counted_as
from django_rl.contrib.ratelimit.keys import get_header as get_header
from django_rl.contrib.ratelimit.keys import user_or_ip as user_or_ip
from django_rl.contrib.ratelimit.rates import _PERIODS as _PERIODS
from django_rl.contrib.ratelimit.rates import _split_rate as _split_rate
from django_rl.contrib.ratelimit.rates import rate_for, to_rate
from django_rl.contrib.ratelimit.rates import rate_re as rate_re
from django_rl.core import installed
from django_rl.core.switches import LIMITS
from django_rl.observability.history import record_result
from django_rl.observability.metrics import count_result
from django_rl.overrides.rules import BLOCK, EXEMPT
from django_rl.policies.exempt import EXEMPTIONS
from django_rl.policies.inline import policy_name

__all__ = ["get_usage", "is_ratelimited"]

#: The answer when Redis cannot answer and ``RATELIMIT_FAIL_OPEN`` is False (the default).
_FAILED = {"count": 0, "limit": 0, "should_limit": True, "time_left": -1}


def _method_match(request: Any, method: object = ALL) -> bool:
    """Return whether ``request.method`` is one ``method`` names (``ALL``: every one).

    ``method`` is a name or a list or tuple of names, in any case; ``"GET"``
    does not cover ``HEAD``.
    """
    if method == ALL or method is None:
        return True
    names = method if isinstance(method, (list, tuple)) else [method]
    return request.method in [str(name).upper() for name in names]


def _methods_text(method: object) -> str:
    """Return how the state's keys name ``method``: equal sets of methods share a count."""
    if method == ALL or method is None:
        return ""
    if isinstance(method, (list, tuple)):
        return "".join(sorted(str(name).upper() for name in method))
    return str(method)


def _get_window(value: str | bytes, period: int) -> int:
    """Return when the current window of ``period`` seconds ends: a Unix time in whole seconds.

    django_rl's windows are aligned on the clock (on the Redis server's: this
    reads this host's, for an estimate), so ``value`` does not move them, where
    the original staggers them by value (see docs/migrating.md).
    """
    now = int(time.time())
    return now - now % period + period


def group_of(fn: Any) -> str:
    """Return the group of view ``fn``: its module, class (for a method) and qualified name.

    The name the original gives, so ``get_usage(fn=view)`` reads the count of
    ``@ratelimit`` on ``view``. What ``method_decorator`` hands a decorator
    (a partial of a bound method) names the method's class.
    """
    if isinstance(fn, functools.partial):
        fn = fn.func
    if getattr(fn, "__name__", None) == "bound_func":  # Django < 2.1's method_decorator
        fn = fn.__closure__[0].cell_contents
    parts = []
    if hasattr(fn, "__module__"):
        parts.append(fn.__module__)
    if hasattr(fn, "__self__"):
        parts.append(fn.__self__.__class__.__name__)
    parts.append(fn.__qualname__)
    return ".".join(parts)


def get_usage(
    request: Any,
    group: str | None = None,
    fn: Any = None,
    key: Any = None,
    rate: Any = None,
    method: Any = ALL,
    increment: bool = False,
) -> dict[str, Any] | None:
    """Return the usage of the limit that applies to ``request``; ``None`` when none does.

    ``{"count", "limit", "should_limit", "time_left"}``: the calls counted in
    the window (every call with ``increment=True``, this one included, denied
    ones too: it can pass the limit), the limit, ``count > limit``, and the
    seconds left in the window (rounded up). ``increment=False`` only reads.

    ``None``: ``RATELIMIT_ENABLE`` is False, the request's method is not one
    of ``method``, the rate (or what a rate callable returns) is ``None``, an
    override set in the admin exempts the key's value, or Redis cannot answer
    a call with ``increment=True`` and ``RATELIMIT_FAIL_OPEN`` is True. If it
    is False (the default): ``should_limit`` True, ``count`` and ``limit`` 0,
    ``time_left`` -1. A read (``increment=False``) Redis cannot answer sees a
    count of 0, as the original's failed cache read does. An override that
    blocks the value answers ``should_limit`` True without counting; a rate
    override counts at its rate (``limit`` and ``time_left`` are its).

    The ``RATELIMIT_*`` settings are read at each call (``conf.py``). Each
    counted call (``increment=True``) that a limit applies to is a decision
    of the policy ``@<group>``: counted once in ``django_rl_decisions_total``
    and the admin's history (:func:`_record`). The first of a run of calls
    that could not be counted logs a WARNING naming ``RATELIMIT_FAIL_OPEN``
    (``outage.py``).

    :param group: names the shared count; default: ``fn``'s dotted name.
    :param key: a callable ``(group, request)``, ``ip``, ``user``,
        ``user_or_ip``, ``get:<name>``, ``post:<name>``, ``header:<name>``
        or a dotted path to a callable.
    :param rate: ``"5/m"``, ``"100/5m"``, ``"100/300"``, ``(count, seconds)``,
        ``None``, or a callable ``(group, request)`` (or its dotted path)
        returning one of those.
    :raises ImproperlyConfigured: without ``group`` or ``fn``, without a key
        or with one it cannot read, or for a period of 0.
    """
    if group is None and fn is None:
        raise ImproperlyConfigured("get_usage must be called with either `group` or `fn` arguments")
    if not installed.looked:  # once per process: is "django_rl" in INSTALLED_APPS?
        installed.look()
    if LIMITS.off or not conf.enabled():  # (LIMITS: rate_limits_disabled, core/switches.py)
        return None
    if EXEMPTIONS.on and EXEMPTIONS.exempts(request):  # EXEMPT: no limit, no Redis
        return None
    if not _method_match(request, method):
        return None
    if group is None:
        group = group_of(fn)
    found = rate_for(group, request, rate)
    if found is None:
        return None
    limit = to_rate(found)
    identity = counted_as(group, request, key)
    alias = conf.use_cache()
    usage = store.count(alias, group, _methods_text(method), limit, identity, increment)
    if usage is None:  # Redis could not answer
        if not increment:
            # As the original's cache read: a count of 0, whatever RATELIMIT_FAIL_OPEN.
            left = limit.period_ms - int(time.time() * 1000) % limit.period_ms
            usage = store.Usage(0, math.ceil(left / 1000), limit.limit)
        else:
            fail_open = conf.fail_open()
            outage.unanswered(alias, fail_open)
            _record(group, fail_open, identity, degraded=True)
            return None if fail_open else dict(_FAILED)
    elif increment and outage.failing is not None and not usage.override:
        outage.answered()
    if usage.override == EXEMPT:
        if increment:
            _record(group, True, identity)
        return None  # an override set in the admin: no limit for this value
    should_limit = usage.override == BLOCK or usage.count > usage.limit
    if increment:
        _record(group, not should_limit, identity)
    return {
        "count": usage.count,
        "limit": usage.limit,
        "should_limit": should_limit,
        "time_left": usage.time_left,
    }


def _record(group: str, allowed: bool, identity: str, *, degraded: bool = False) -> None:
    """Count a decision (a counted call) in the metrics and the admin's history (in memory).

    Under ``@<group>``, with the ``result`` labels of every decision: a call
    that could not be counted is ``degraded_allowed`` or ``degraded_denied``
    (``RATELIMIT_FAIL_OPEN`` decided); an exemption set in the admin is
    ``allowed``, as django_rl's own policies count one.
    """
    name = policy_name(group)
    if degraded:
        count_result(name, "degraded_allowed" if allowed else "degraded_denied")
    else:
        count_result(name, "allowed" if allowed else "denied")
    record_result(name, allowed, identity)


def is_ratelimited(
    request: Any,
    group: str | None = None,
    fn: Any = None,
    key: Any = None,
    rate: Any = None,
    method: Any = ALL,
    increment: bool = False,
) -> bool:
    """Return whether ``request`` is over the limit: ``get_usage(...)["should_limit"]``.

    ``False`` wherever :func:`get_usage` returns ``None``.
    """
    usage = get_usage(request, group, fn, key, rate, method, increment)
    if usage is None:
        return False
    return bool(usage["should_limit"])


get_usage.ALL = ALL  # type: ignore[attr-defined]
get_usage.UNSAFE = UNSAFE  # type: ignore[attr-defined]
is_ratelimited.ALL = ALL  # type: ignore[attr-defined]
is_ratelimited.UNSAFE = UNSAFE  # type: ignore[attr-defined]
