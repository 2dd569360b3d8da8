"""The result of one rate-limit decision."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

from django_rl.core._speedups import slot_setters

if TYPE_CHECKING:
    from django_rl.leases import Lease


@dataclass(frozen=True, slots=True, init=False)
class Decision:
    """What a policy decided for one identity, the same for every algorithm.

    :ivar allowed: whether the hit was allowed (for ``peek``: whether a hit of
        cost 1 would be allowed now).
    :ivar limit: hits per period (``fixed_window``, ``sliding_log``) or the
        bucket's capacity (``token_bucket``).
    :ivar remaining: hits of cost 1 that would still be allowed right now,
        after this one; never negative.
    :ivar retry_after: seconds until the same hit would be allowed; ``0.0``
        when it was allowed.
    :ivar reset_after: seconds until the state is back to full
        (``remaining == limit``); ``0.0`` when it already is.
    :ivar policy: the policy's name.
    :ivar degraded: ``True`` when Redis could not answer: the decision follows
        the policy's ``fallback_rate`` (then ``fallback`` is ``True`` too) or,
        without one, ``fail_open`` instead of a count.
    :ivar window: seconds the policy's rate takes to grant its whole limit
        (``w`` of the ``RateLimit-Policy`` header), for the rate that decided:
        a policy whose rate depends on the request (per-plan rates) has one
        per rate. ``None`` when unknown.
    :ivar fallback: ``True`` when the policy's outage fallback decided: a
        count in this process at its ``fallback_rate`` (``fallback.py``);
        ``limit``, ``remaining``, the times and ``window`` are the fallback's.
    :ivar shadow: ``True`` when the policy is in shadow mode (its ``mode`` is
        ``"shadow"``, or ``DJANGO_RL["SHADOW"]`` is on): ``allowed`` and the
        rest say what it decided, but it is never enforced. The front doors
        do not refuse a request for it, leave it out of the rate-limit
        headers and of ``request.limited``, and report its denials as shadow
        denials (signal, log). See :attr:`denies`.
    :ivar lease: what gives back the slots a ``concurrency`` hit took (only
        on a hit that was allowed and counted; ``None`` otherwise): pass the
        Decision to :func:`django_rl.leases.release` when the work is done.
        The front doors do it when the request is done (``http/slots.py``).
    """

    allowed: bool
    limit: int
    remaining: int
    retry_after: float
    reset_after: float
    policy: str
    degraded: bool = False
    window: int | None = None
    fallback: bool = False
    shadow: bool = False
    lease: Lease | None = field(default=None, compare=False, repr=False)

    # A Decision is made on every hit: this ``__init__`` is the one
    # ``dataclass`` would write (same signature and defaults, the instance
    # frozen), but sets the fields through ``_SETTERS``, each slot's own
    # setter (``core/_speedups.py``), in about half the time of the
    # ``object.__setattr__`` per field that a frozen dataclass's costs.
    # ``dataclasses.replace`` calls it too. A field added above and not here
    # fails every Decision at once (the unpacking below).
    def __init__(
        self,
        allowed: bool,
        limit: int,
        remaining: int,
        retry_after: float,
        reset_after: float,
        policy: str,
        degraded: bool = False,
        window: int | None = None,
        fallback: bool = False,
        shadow: bool = False,
        lease: Lease | None = None,
    ) -> None:
        (
            set_allowed, set_limit, set_remaining, set_retry_after, set_reset_after, set_policy,
            set_degraded, set_window, set_fallback, set_shadow, set_lease,
        ) = _SETTERS  # fmt: skip
        set_allowed(self, allowed)
        set_limit(self, limit)
        set_remaining(self, remaining)
        set_retry_after(self, retry_after)
        set_reset_after(self, reset_after)
        set_policy(self, policy)
        set_degraded(self, degraded)
        set_window(self, window)
        set_fallback(self, fallback)
        set_shadow(self, shadow)
        set_lease(self, lease)

    @property
    def denies(self) -> bool:
        """Return whether this Decision refuses the hit: denied, and not in shadow mode.

        What code that enforces a Decision itself should test (the front
        doors do): a shadow policy's denial (``allowed`` False) refuses nothing.
        """
        return not self.allowed and not self.shadow

    @property
    def retry_after_header(self) -> int:
        """Return ``Retry-After`` in whole seconds: rounded up, at least 1."""
        return max(1, math.ceil(self.retry_after))


#: A setter per field of Decision, in field order (``Decision.__init__``).
_SETTERS = slot_setters(Decision, [f.name for f in fields(Decision)])
