"""django_rl: Redis rate limiting for Django, one round trip per decision.

Public names: :func:`get_policy`, :func:`register_policy`, :class:`Policy`,
:class:`Decision`, :func:`hit_many` (several hits decided together),
:func:`usage` / :func:`ausage` (a request's standing, counting nothing),
:func:`acquire` / :func:`aacquire` / :func:`limited` (waiting for a hit),
:func:`penalize`, :func:`reward`, :func:`block`, :func:`unblock`. The
front doors live in :mod:`django_rl.decorators` and :mod:`django_rl.throttling`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django_rl.core.decision import Decision
from django_rl.policies.programmatic import ahit_many, hit_many
from django_rl.policies.registry import Policy, get_policy, register_policy

if TYPE_CHECKING:
    from django_rl.policies.points_api import block, penalize, reward, unblock
    from django_rl.policies.usage import ausage, usage
    from django_rl.policies.waiting import aacquire, acquire, limited

__version__ = "0.1.0"

#: Names imported when first asked for (``usage`` pulls in the async peeks; the
#: points and blocks functions, ``policies/points_api.py``).
_LAZY = {
    "usage": "django_rl.policies.usage",
    "ausage": "django_rl.policies.usage",
    "acquire": "django_rl.policies.waiting",
    "aacquire": "django_rl.policies.waiting",
    "limited": "django_rl.policies.waiting",
    **dict.fromkeys(("penalize", "reward", "block", "unblock"), "django_rl.policies.points_api"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'django_rl' has no attribute {name!r}")


__all__ = [
    "Decision",
    "Policy",
    "__version__",
    "aacquire",
    "acquire",
    "ahit_many",
    "ausage",
    "block",
    "get_policy",
    "hit_many",
    "limited",
    "penalize",
    "register_policy",
    "reward",
    "unblock",
    "usage",
]
