"""The policies of the Django Ninja drop-in (``contrib/ninja.py``): ``ninja.<scope>``.

One sliding-log policy per (scope, rate), as the DRF drop-in's
(``throttle_policies.py``), named ``ninja.<scope>`` (``ninja.anon``) and
kept apart from DRF's by the keys' fingerprint. Imports no Ninja: the admin
and ``manage.py ratelimit`` list these policies (:func:`known_policies`) in
any process.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from django.conf import settings as django_settings

from django_rl.contrib.throttle_policies import ThrottlePolicies
from django_rl.policies.policy import Policy

#: The Ninja drop-in's policies.
POLICIES = ThrottlePolicies("ninja", "Ninja throttle")


def known_policies() -> list[Policy]:
    """Return the drop-in's policies this process knows of.

    Those it has decided with, and, once the drop-in is imported, one per
    scope of ``NINJA_DEFAULT_THROTTLE_RATES`` that has a rate.
    """
    if sys.modules.get("django_rl.contrib.ninja") is not None:
        rates = getattr(django_settings, "NINJA_DEFAULT_THROTTLE_RATES", None) or {}
        for scope, text in rates.items() if isinstance(rates, Mapping) else ():
            POLICIES.add(scope, text)
    return list(POLICIES.built.values())


__all__ = ["POLICIES", "known_policies"]
