"""The policies of the Celery tests' tasks (``tests/sites/settings_celery.py``; eager tests)."""

from __future__ import annotations

POLICIES = {
    # The load case: 300 tasks under one global 20/s, across 3 workers.
    "tasks.global": {"algorithm": "fixed_window", "rate": "20/s", "key": "ip"},
    # Chains and groups: every add shares one identity, 2 a second.
    "tasks.pairs": {"algorithm": "fixed_window", "rate": "2/s", "key": "ip"},
    # A task that retries once itself, denied between its runs.
    "tasks.once": {"algorithm": "fixed_window", "rate": "1/s", "key": "ip"},
    # Keys that fail: their runs share the identity "global", 1 a second.
    "tasks.keyed": {"algorithm": "fixed_window", "rate": "1/s", "key": "ip"},
}
