"""Turning limits off, deciding a policy by other keys, using a limit up: for tests.

* :func:`rate_limits_disabled`: no policy counts, denies or sends a Redis
  command while it is on, in the whole process (``core/switches.py``, read by
  the one decision, ``Policy._decide``);
* :func:`override_policy`: one policy decided by other keys of its spec, with
  fresh state (``registry.replace_policy``);
* :func:`exhaust`: an identity's limit used up now, in as few hits as the
  algorithm allows.

The first two are context managers and decorators (``switching.Switched``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, overload

from django_rl.core.decision import Decision
from django_rl.core.switches import LIMITS
from django_rl.policies.registry import Policy, policies_named, replace_policy, restore_policy
from django_rl.testing.switching import Switched

T = TypeVar("T")

#: Rounds of look-then-hit :func:`exhaust` tries before giving up (another
#: client taking the same state, a token coming back between two of them).
EXHAUST_ROUNDS = 20


class RateLimitsDisabled(Switched):
    """Every rate limit off while on; see :func:`rate_limits_disabled`."""

    def enable(self) -> object:
        LIMITS.turn_off()
        return None

    def disable(self, token: object) -> None:
        LIMITS.turn_back()


class _RateLimitsDisabledHelper(RateLimitsDisabled):
    """Turn every rate limit off while on: a context manager, and a decorator bare or called.

    In the whole process (every thread), for every front door (``@ratelimit``,
    ``PolicyThrottle``, the drop-ins), inline and per-plan policies, and
    programmatic ``Policy.hit``/``peek`` and ``hit_many``: nothing is counted
    and no Redis command is sent (the process's overrides loader and history
    writer skip their rounds too). Requests get no Decision and no
    rate-limit header, ``request.limited`` is ``False``; ``hit``/``peek``
    answer allowed with ``limit`` 0. Explicit state changes still talk to
    Redis: ``reset_rate_limits()``, ``Policy.reset``, the admin. Nested and
    overlapping uses (threads) hold limits off until the last one ends; they
    are back after it, also when the test fails.

    ``with rate_limits_disabled():`` (or without the parentheses),
    ``@rate_limits_disabled``, ``@rate_limits_disabled()``, on functions
    (async too), test methods, ``TestCase`` classes and pytest test classes.
    """

    @overload
    def __call__(self, decorated: None = None) -> RateLimitsDisabled: ...
    @overload
    def __call__(self, decorated: T) -> T: ...
    def __call__(self, decorated: Any = None) -> Any:
        if decorated is None:
            return RateLimitsDisabled()
        return super().__call__(decorated)


#: See :class:`_RateLimitsDisabledHelper`: ``rate_limits_disabled()``,
#: ``@rate_limits_disabled``, ``with rate_limits_disabled:``.
rate_limits_disabled = _RateLimitsDisabledHelper()


class OverridePolicy(Switched):
    """A policy decided by other keys of its spec while on; see :func:`override_policy`."""

    def __init__(self, name: str, keys: dict[str, Any]) -> None:
        super().__init__()
        self.name = name
        self.keys = keys

    def enable(self) -> object:
        return replace_policy(self.name, self.keys)

    def disable(self, token: object) -> None:
        restore_policy(token)


def override_policy(name: str, **spec: Any) -> OverridePolicy:
    """Decide the policy ``name`` with ``spec``'s keys in place of its own: a context manager
    and a decorator.

    ``override_policy("login", rate="2/m")``: the keys given replace those
    of the policy's spec (from settings or ``register_policy``), the others
    stay. Each time it is turned on the policy's state starts fresh (keys of
    their own in Redis: what the test before left does not count, and the
    policy's own state is untouched); the definition is restored after,
    also when the test fails. In the whole process, every front door.
    An inline policy is named by its group (``"@<group>"``).

    :raises UnknownPolicy: when turned on, for a name no policy has.
    :raises ConfigurationError: when turned on, if the spec with these keys
        is wrong (the message of ``manage.py check``).
    """
    return OverridePolicy(name, spec)


def exhaust(policy: Policy | str, identity: str | None = None, *, request: Any = None) -> Decision:
    """Use up ``identity``'s limit under ``policy`` now; return its state then (denied).

    ``identity`` as the front doors count it (``"ip:203.0.113.9"``,
    ``"user:42"``), or ``None`` with ``request=`` to take the request's.
    ``request`` also chooses a per-plan policy's rate. ``policy``: a
    ``Policy``, a name, or an inline group (``"@<group>"``: each of its
    policies). Hits of the cost left (one or two round trips for most
    algorithms), then a look (``peek``) that says it is denied. A window that
    ends at once (a fixed window's last millisecond) is used up again.
    Counted like any programmatic hit (metrics, no signal).

    :raises ValueError: if the policy does not apply to the request, or no
        limit applies to the identity (an exemption, a rate of ``None``).
    :raises RuntimeError: while :func:`rate_limits_disabled` is on, if Redis
        cannot answer, or if the limit could not be used up.
    """
    if LIMITS.off:
        raise RuntimeError("exhaust() while rate_limits_disabled() is on: no limit applies")
    found = [policy] if isinstance(policy, Policy) else policies_named(policy)
    state: Decision | None = None
    for each in found:
        who = identity
        if who is None:
            if request is None:
                raise TypeError("exhaust() takes an identity, or request=")
            who = each.identify(request)
            if who is None:
                raise ValueError(f"the policy {each.name!r} does not apply to that request")
        state = _exhaust_one(each, who, request)
    assert state is not None  # policies_named raises rather than find none
    return state


def _exhaust_one(policy: Policy, identity: str, request: Any) -> Decision:
    hit: Callable[..., Decision] = policy.hit
    for _ in range(EXHAUST_ROUNDS):
        seen = policy.peek(identity, request=request)
        if seen.degraded:
            raise RuntimeError(f"exhaust(): Redis could not answer for {policy.name!r}")
        if not seen.allowed:
            return seen
        if seen.limit == 0:
            raise ValueError(f"no limit applies to {identity!r} under {policy.name!r}")
        hit(identity, max(seen.remaining, 1), request=request)
    raise RuntimeError(
        f"exhaust(): {identity!r} still allowed under {policy.name!r} after "
        f"{EXHAUST_ROUNDS} rounds (another client keeps freeing it?)"
    )


__all__ = [
    "OverridePolicy",
    "RateLimitsDisabled",
    "exhaust",
    "override_policy",
    "rate_limits_disabled",
]
