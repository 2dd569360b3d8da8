"""Overrides set from the admin: another rate, an exemption or a block, per policy and identity.

``rules.py``: the rules decisions read, and how targets are written;
``loader.py``: the thread that loads them from the database in the
background; the admin's form is ``admin/override_form.py``. The model is
``django_rl.models.Override``; see docs/overrides.md.
"""

from __future__ import annotations

from django_rl.overrides.loader import LOADER, notify_changed, rules_for
from django_rl.overrides.rules import BLOCK, EXEMPT, RATE, PolicyRules, Rule, normalize_target

__all__ = [
    "BLOCK",
    "EXEMPT",
    "LOADER",
    "RATE",
    "PolicyRules",
    "Rule",
    "normalize_target",
    "notify_changed",
    "rules_for",
]
