"""The policies ``RULES`` already decided for a request: never counted twice.

``RateLimitMiddleware`` decides the matching rules' policies before the view
runs (``engine.decide_together``), with the view's own limits it can see
there (``@ratelimit`` on the function or ``dispatch``, ``PolicyThrottle``).
A front door it cannot see in advance decides later: ``@ratelimit`` on a
DRF view (after DRF's authentication), on a class-based view's ``get``
(``method_decorator``), or a throttle whose policy names only its instance
knows. When such a limit names a policy the middleware already decided for
the request, the middleware's Decision is that policy's answer (the
request was counted once, under the identity the middleware saw), and only
the limit's other policies are decided.

Kept on the Django request as a mapping of policy name to Decision; read
only while ``EXEMPTIONS.on`` (RULES or EXEMPT set), so it costs nothing on
a site without rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django_rl.core.decision import Decision
from django_rl.policies.policy import Policy

#: The Django request's attribute: ``{policy name: Decision}`` RULES' middleware made.
RULED = "_django_rl_ruled"


def note(request: Any, decided: Mapping[str, Decision]) -> None:
    """Keep on ``request`` the Decisions the middleware made, by policy name."""
    http_request = getattr(request, "_request", request)
    setattr(http_request, RULED, dict(decided))


def decided(request: Any) -> Mapping[str, Decision] | None:
    """Return the Decisions RULES' middleware made for ``request`` (``None``: it made none)."""
    http_request = getattr(request, "_request", request)
    found: Mapping[str, Decision] | None = getattr(http_request, RULED, None)
    return found or None


def split(
    ruled: Mapping[str, Decision], policies: Sequence[Policy]
) -> tuple[list[Decision], list[Policy]]:
    """Return the Decisions of ``policies`` already made, and the policies still to decide."""
    made = [ruled[p.name] for p in policies if p.name in ruled]
    return made, [p for p in policies if p.name not in ruled]
