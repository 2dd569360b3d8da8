"""Look at the live state in Redis, and reset it: for the admin page and ``manage.py ratelimit``.

``keyspace`` finds the app's keys (bounded SCAN, on every server that holds
them) and takes them apart; ``rows`` reads the state of a page of them in one
pipeline; ``listing`` puts both together as a :class:`Page` of a
:class:`Query`.
"""

from __future__ import annotations

from django_rl.inspection.keyspace import (
    FIRST_PAGE,
    SCAN_BUDGET,
    CursorError,
    ParsedKey,
    operator_identity,
    parse_key,
)
from django_rl.inspection.listing import (
    MAX_PAGE_SIZE,
    PAGE_SIZE,
    Page,
    Query,
    configured_policies,
    identities_everywhere,
    list_counters,
    reset_everywhere,
)
from django_rl.inspection.rows import LIVE, STALE, UNCONFIGURED, Row

__all__ = [
    "FIRST_PAGE",
    "LIVE",
    "MAX_PAGE_SIZE",
    "PAGE_SIZE",
    "SCAN_BUDGET",
    "STALE",
    "UNCONFIGURED",
    "CursorError",
    "Page",
    "ParsedKey",
    "Query",
    "Row",
    "configured_policies",
    "identities_everywhere",
    "list_counters",
    "operator_identity",
    "parse_key",
    "reset_everywhere",
]
