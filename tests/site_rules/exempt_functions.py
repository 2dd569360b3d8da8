"""``EXEMPT`` functions the tests name by dotted path."""

from __future__ import annotations

from typing import Any

CALLS: list[str] = []


def health_checks(request: Any) -> bool:
    CALLS.append(request.path)
    return request.path.startswith("/health")


def raises(request: Any) -> bool:
    raise RuntimeError("broken on purpose")


def not_a_bool(request: Any) -> object:
    return "yes"
