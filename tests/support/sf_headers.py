"""Read rate-limit headers back with a real Structured Fields parser (http-sf)."""

from __future__ import annotations

import math
from typing import Any

import http_sf

from django_rl import Decision


def parse_list(value: str) -> list[tuple[Any, dict[str, Any]]]:
    """Parse a List field; every member must be an Item (a bare value with parameters)."""
    parsed = http_sf.parse(value.encode("ascii"), tltype="list")
    assert isinstance(parsed, list)
    return [(item, dict(params)) for item, params in parsed]


def policies(headers: Any) -> dict[str, dict[str, Any]]:
    """Return RateLimit-Policy as {policy: {"q": ..., "w": ...}}, checking the value types."""
    items = parse_list(headers["RateLimit-Policy"])
    for name, params in items:
        assert type(name) is str, f"policy identifier {name!r} must be an sf-string"
        assert all(type(v) is int and v >= 0 for v in params.values()), params
    return {name: params for name, params in items}


def ratelimit(headers: Any) -> tuple[str, dict[str, Any]]:
    """Return the one item of RateLimit as (policy, {"r": ..., "t": ...})."""
    ((name, params),) = parse_list(headers["RateLimit"])
    assert type(name) is str
    assert all(type(v) is int and v >= 0 for v in params.values()), params
    return name, params


def expected_t(decision: Decision) -> int:
    """What ``t`` must be for a decision: Retry-After when denied, else time to full."""
    if not decision.allowed:
        return max(1, math.ceil(decision.retry_after))
    return math.ceil(decision.reset_after)
