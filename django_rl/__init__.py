"""django_rl: Redis rate limiting for Django, one round trip per decision.

Public names: :func:`get_policy`, :func:`register_policy`, :class:`Policy`,
:class:`Decision`, :func:`hit_many` (several hits decided together). The
front doors live in :mod:`django_rl.decorators` and :mod:`django_rl.throttling`.
"""

from __future__ import annotations

from django_rl.core.decision import Decision
from django_rl.policies.programmatic import ahit_many, hit_many
from django_rl.policies.registry import Policy, get_policy, register_policy

__version__ = "0.1.0"

__all__ = [
    "Decision",
    "Policy",
    "__version__",
    "ahit_many",
    "get_policy",
    "hit_many",
    "register_policy",
]
