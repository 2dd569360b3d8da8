"""The policies of the DRF drop-in (``contrib/drf.py``): one per scope and rate.

A DRF throttle names its limit by a scope (``"anon"``, ``"user"``, a view's
``throttle_scope``) and a rate. Each (scope, rate) is one django_rl
:class:`~django_rl.policies.policy.Policy`, built once per process and kept until the
settings change, so a decision costs a dict lookup here, never a build.

**Names.** ``drf.<scope>`` (``drf.anon``), or ``drf.~``-less
``drf.x<16 hex>`` for a scope that cannot stand in a key, and ``drf`` for a
throttle that has a ``rate`` but no ``scope``. The identity is what
``get_cache_key`` returns (``throttle_anon_192.0.2.1``), so throttles of one
name but different cache keys never share state; the keys' fingerprint
holds the rate and ``drf``, so a changed rate starts fresh and a policy in
``DJANGO_RL["POLICIES"]`` of the same name never reads this state.

**Algorithm.** ``sliding_log``, DRF's own (its history list is a sliding
log): the same answers, exact in Redis.

Does not import ``rest_framework``: the admin and ``manage.py ratelimit``
list these policies (:func:`known_policies`) in any process.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping
from typing import Any

from django.conf import settings as django_settings

from django_rl.contrib.throttle_policies import ALGORITHM, ThrottlePolicies
from django_rl.core.urlconf import PerURLconf
from django_rl.policies.policy import Policy

#: Joins the keys' fingerprint: no named policy shares a drop-in's state.
FINGERPRINT_EXTRA = "drf"
#: The module path a project's settings name the drop-in's classes by.
MODULE = "django_rl.contrib.drf."

#: The DRF drop-in's policies (``throttle_policies.py``).
POLICIES = ThrottlePolicies(FINGERPRINT_EXTRA, "DRF throttle")
_policies = POLICIES.built
#: The policy name of a DRF ``scope``: ``drf.<scope>``, a digest, or ``drf``.
policy_name = POLICIES.name
#: The policy of a scope at ``limit`` requests per ``period`` seconds, built once.
policy_for = POLICIES.policy_for
_add = POLICIES.add


def known_policies() -> list[Policy]:
    """Return the drop-in's policies this process knows of.

    What the admin's process may never have decided with itself, besides
    those it has: when ``REST_FRAMEWORK`` names a class of the drop-in in
    ``DEFAULT_THROTTLE_CLASSES``, one per scope of ``DEFAULT_THROTTLE_RATES``
    that has a rate; and the drop-in's throttles of the URLconf's DRF views
    (their ``throttle_classes``), at the rate each would use.
    """
    rest = getattr(django_settings, "REST_FRAMEWORK", None) or {}
    classes = rest.get("DEFAULT_THROTTLE_CLASSES", ()) if isinstance(rest, Mapping) else ()
    if any(isinstance(path, str) and path.startswith(MODULE) for path in classes):
        rates = rest.get("DEFAULT_THROTTLE_RATES", {})
        for scope, text in rates.items() if isinstance(rates, Mapping) else ():
            _add(scope, text)
    for scope, text in _view_rates():
        _add(scope, text)
    return list(_policies.values())


def _view_rates() -> list[tuple[str | None, object]]:
    """Return (scope, rate) of the drop-in's throttles on the URLconf's views.

    Found without a request: a ``ScopedRateThrottle`` takes the view's
    scope; the others their own ``scope`` and ``rate``. A throttle that
    cannot say (a missing scope, a rate its ``get_rate`` only knows per
    request) is left out. Never raises: a URLconf that does not import is
    Django's check's to report.
    """
    if sys.modules.get("django_rl.contrib.drf") is None:
        # Nothing in this process imported the drop-in: no view names it.
        return []
    found = _VIEW_RATES.get()
    return [] if found is None else found


def _rates_of(patterns: list[Any]) -> list[tuple[str | None, object]]:
    drf = sys.modules["django_rl.contrib.drf"]
    found: list[tuple[str | None, object]] = []
    for pattern in patterns:
        callback = pattern.callback
        view = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
        for throttle_class in getattr(view, "throttle_classes", None) or ():
            if isinstance(throttle_class, type) and issubclass(
                throttle_class, drf.SimpleRateThrottle
            ):
                with contextlib.suppress(Exception):  # its own error, met by its requests
                    found.append(_scope_and_rate(drf, throttle_class, view))
    return [(scope, rate) for scope, rate in found if scope or rate]


#: The admin asks on every poll: each URLconf is walked once.
_VIEW_RATES = PerURLconf(_rates_of)


def _scope_and_rate(drf: Any, throttle_class: Any, view: Any) -> tuple[str | None, object]:
    # Not through __init__: ScopedRateThrottle's rate is the view's scope's.
    throttle = throttle_class.__new__(throttle_class)
    if issubclass(throttle_class, drf.ScopedRateThrottle):
        throttle.scope = getattr(view, throttle_class.scope_attr, None)
        return (throttle.scope, throttle.get_rate() if throttle.scope else None)
    return (throttle.scope, getattr(throttle, "rate", None) or throttle.get_rate())


__all__ = ["ALGORITHM", "known_policies", "policy_for", "policy_name"]
