"""A custom identity function, as a policy's ``key`` can name by dotted path."""

from __future__ import annotations

from django.http import HttpRequest


def tenant(request: HttpRequest) -> str | None:
    """Count requests per tenant (``X-Tenant`` header); ``None``: the policy does not apply."""
    name = request.headers.get("X-Tenant")
    return f"tenant:{name}" if name else None
