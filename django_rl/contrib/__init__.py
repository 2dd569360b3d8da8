"""Drop-in modules: other rate limiters' public APIs, decided by django_rl.

``django_rl.contrib.drf`` stands in for ``rest_framework.throttling``;
``django_rl.contrib.ratelimit`` for ``django_ratelimit``;
``django_rl.contrib.ninja`` for ``ninja.throttling``. A project switches
by replacing the module path in its imports and settings.

The policies a drop-in makes are policies like any other (``Policy``), so
the admin's live counters and ``manage.py ratelimit`` show them. Each
drop-in names, in :data:`DROPINS`, a module whose ``known_policies()``
returns the policies it knows of in this process (from the settings, from
the URLconf's views, and those it has decided with); a drop-in whose
dependency is not installed is skipped. An explicit dict, not registration
by import: the admin's process may never have imported the drop-in.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django_rl.policies.policy import Policy

#: Drop-in name -> the module whose ``known_policies()`` lists its policies.
DROPINS: dict[str, str] = {
    "drf": "django_rl.contrib.drf_policies",
    "ninja": "django_rl.contrib.ninja_policies",
    "ratelimit": "django_rl.contrib.ratelimit.store",
}


def dropin_policies() -> list[Policy]:
    """Return every policy the drop-ins know of in this process, once each by name and rate.

    Never raises for a drop-in's problem (a missing dependency, a bad
    setting): the admin and the commands list what they can.
    """
    found: dict[tuple[str, object], Policy] = {}
    for path in DROPINS.values():
        try:
            module = importlib.import_module(path)
            policies = module.known_policies()
        except Exception:  # an optional dependency missing, or a project's bad setting
            continue
        for policy in policies:
            # A policy with a rate per call (django-ratelimit's) has a
            # fingerprint per rate: it is one policy of its own.
            same = id(policy) if policy.per_request else policy.fingerprint
            found.setdefault((policy.name, same), policy)
    return list(found.values())


__all__ = ["DROPINS", "dropin_policies"]
