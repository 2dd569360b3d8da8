"""A hit that only Redis can decide (``Policy._decide``'s, asked by ``Policy.ask`` or ``aask``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from django_rl.policies.plans import Variant
    from django_rl.policies.policy import Policy


class Pending(NamedTuple):
    """A hit that only Redis can decide: what a policy needs to ask and to read the answer.

    :ivar key: the identity's base key at ``variant``.
    :ivar asked_at: the deny cache's clock when it was made (0.0 without one).
    :ivar request: the request, or ``None`` (programmatic hits).
    """

    policy: Policy
    variant: Variant
    identity: str
    key: str
    cost: int
    asked_at: float
    #: The request deciding it, or ``None`` (``identity_blocked`` names it).
    request: Any = None
