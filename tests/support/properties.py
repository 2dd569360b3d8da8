"""Hypothesis settings of the property-based tests, in one place (docs/reliability.md cites them).

Every run draws the same examples (``derandomize``, no example database), so
a failure reproduces and CI time is bounded; ``deadline=None`` because a
Redis round trip on a busy machine makes per-example deadlines meaningless.
"""

from __future__ import annotations

from hypothesis import settings

#: Pure functions (identities, key making): cheap, so many examples.
PURE = settings(max_examples=500, deadline=None, derandomize=True, database=None)
#: Examples that talk to Redis or go through the test client.
WITH_REDIS = settings(max_examples=100, deadline=None, derandomize=True, database=None)
#: The key-hygiene state machine: each sequence ends by waiting 1 s for keys to expire.
STATEFUL = settings(
    max_examples=8, stateful_step_count=20, deadline=None, derandomize=True, database=None
)
