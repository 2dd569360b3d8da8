"""A rate function, as a policy's ``rate`` can name by dotted path (per-plan rates)."""

from __future__ import annotations

from django.http import HttpRequest

#: Requests an hour, per plan.
PLAN_RATES = {"free": "100/h", "pro": "10000/h"}


def rate_for_plan(request: HttpRequest) -> str | None:
    """Return the rate of the user's plan; ``None`` (no limit) for staff.

    Members of the group ``pro`` get the pro rate. Anonymous users have no
    plan: the ``free`` rate (the policy's ``key`` decides whether it counts
    them at all).
    """
    user = request.user
    if user.is_staff:
        return None
    is_pro = user.is_authenticated and user.groups.filter(name="pro").exists()
    return PLAN_RATES["pro" if is_pro else "free"]
