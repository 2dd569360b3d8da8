"""Rate functions of the per-plan tests: a user's plan decides their rate.

``PLAN_OF`` maps a username to a plan; tests change it to move a user from
one plan to another. Anonymous requests and the ``unlimited`` plan get
``None``: the policy does not limit them (and never calls Redis).
"""

from __future__ import annotations

from typing import Any

PLANS: dict[str, str | None] = {"free": "2/h", "pro": "4/h", "unlimited": None}
PLAN_OF: dict[str, str] = {}
#: The rate every request of the exactness suite gets.
EXACT_RATE = "100/h"


def rate_for_user(request: Any) -> str | None:
    user = request.user
    if not user.is_authenticated:
        return None
    return PLANS[PLAN_OF.get(user.username, "free")]


def tiny_rate(request: Any) -> str:
    """A rate whose limit (2) is below the cost some views give a request (5)."""
    return "2/h"


def from_header(request: Any) -> object:
    """The rate the request's X-Rate header names (tests of bad return values)."""
    value = request.headers.get("X-Rate")
    return None if value is None else {"int": 5}.get(value, value)


def exact_rate(request: Any) -> str:
    return EXACT_RATE
