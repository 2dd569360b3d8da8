"""DRF throttling through the policy registry.

Add ``django_rl.throttling.PolicyThrottle`` to ``DEFAULT_THROTTLE_CLASSES`` (or
a view's ``throttle_classes``) and name the policy in the view's
``throttle_scope``, DRF's own convention. A view without a scope is not
limited unless ``DJANGO_RL["DEFAULT_POLICY"]`` names a policy. Denied requests
get DRF's own ``Throttled`` error: 429 with ``Retry-After`` and ``wait``.
"""

from __future__ import annotations

from typing import Any

from rest_framework.throttling import BaseThrottle

from django_rl.conf import get_settings
from django_rl.decision import Decision
from django_rl.policies import get_policy


class PolicyThrottle(BaseThrottle):
    """Throttle a DRF view by the policy its ``throttle_scope`` names.

    DRF makes a new throttle per request and calls :meth:`wait` on the one
    that denied, so the Decision is kept here for it, and nothing else.
    """

    decision: Decision | None = None

    def get_policy_name(self, view: Any) -> str | None:
        """Return the view's ``throttle_scope``, else ``DEFAULT_POLICY`` (may be None)."""
        return getattr(view, "throttle_scope", None) or get_settings().default_policy

    def allow_request(self, request: Any, view: Any) -> bool:
        name = self.get_policy_name(view)
        if name is None:
            return True
        self.decision = get_policy(name).hit_request(request)
        return self.decision is None or self.decision.allowed

    def wait(self) -> float | None:
        """Return seconds until a retry would be allowed: Retry-After, whole and at least 1."""
        if self.decision is None or self.decision.allowed:
            return None
        return float(self.decision.retry_after_header)
