"""Policies and the registry that builds them from ``DJANGO_RL["POLICIES"]``."""

from __future__ import annotations

import functools
import logging
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver
from redis.exceptions import RedisError

from django_rl.algorithms import (
    ALGORITHMS,
    Algorithm,
    Outcome,
    StaticAlgorithm,
    Unlimited,
    fingerprint_text,
)
from django_rl.backends import Backend, RedisNode, get_backend
from django_rl.conf import get_settings
from django_rl.decision import Decision
from django_rl.deny_cache import DenyCache, get_deny_cache
from django_rl.exceptions import BackendError, UnknownPolicy
from django_rl.headers import quota_window
from django_rl.identities import IdentityFunction, resolve_identity
from django_rl.keys import fingerprint, key_parts, safe_identity
from django_rl.reprs import short_repr
from django_rl.validation import policy_problems

#: Retry-After of a request denied because Redis is down and FAIL_OPEN is False.
DEGRADED_RETRY_AFTER = 1.0

logger = logging.getLogger("django_rl")


class Policy:
    """A named limit: an algorithm, an identity function and where state lives.

    Get one with :func:`get_policy`. ``identify(request)`` returns the
    identity a request counts as, or ``None`` if the policy does not apply to
    it. Methods that take an ``identity`` accept any string; it is made safe
    for a Redis key (see ``keys.safe_identity``). ``denials`` is the
    process's deny cache (``None``: every hit asks Redis).
    """

    def __init__(
        self,
        name: str,
        algorithm: Algorithm,
        identify: IdentityFunction,
        backend: Backend,
        *,
        key_prefix: str,
        fail_open: bool,
        denials: DenyCache | None = None,
    ) -> None:
        self.name = name
        self.algorithm = algorithm
        #: The most hits of cost 1 allowed at once.
        self.limit = algorithm.limit
        self.identify: IdentityFunction = identify
        self.backend = backend
        self.key_prefix = key_prefix
        self.fail_open = fail_open
        self.denials = denials
        #: ``rate: None`` or ``"0/<period>"``: decided here, never by Redis
        #: (``algorithms/static.py``); ``None`` for every other rate.
        self.static = algorithm if isinstance(algorithm, StaticAlgorithm) else None
        #: ``rate: None``: the front doors skip the policy (:meth:`hit_request`).
        self.unlimited = isinstance(algorithm, Unlimited)
        self.fingerprint = fingerprint(fingerprint_text(algorithm))
        self._key_head, self._key_tail = key_parts(key_prefix, name, self.fingerprint)

    def __repr__(self) -> str:
        return f"<Policy {self.name!r}: {self.algorithm.description}>"

    def key(self, identity: str) -> str:
        """Return the base Redis key of ``identity`` under this policy."""
        return self._key_head + safe_identity(identity) + self._key_tail

    def hit(self, identity: str, cost: int = 1) -> Decision:
        """Count a hit of weight ``cost`` for ``identity`` and decide, in one round trip.

        Never raises for Redis trouble: if Redis cannot answer, the decision
        follows ``FAIL_OPEN`` and has ``degraded=True``. A hit Redis has
        already denied until a known time is answered by the deny cache,
        without Redis (see ``deny_cache.py``).

        :raises ValueError: if ``cost`` is not a whole number from 1 to the limit
            (a hit heavier than the limit could never be allowed). A policy of
            ``rate: None`` or ``"0/<period>"`` takes any cost from 1: it
            allows (``limit`` 0: no limit applies), or denies, everything alike.
        """
        if self.static is not None:
            _check_whole(cost)
            return self._decision(self.static.outcome)
        self._check_cost(cost)
        key = self.key(identity)
        denials = self.denials
        if denials is not None:
            known = denials.lookup(key, cost)
            if known is not None:
                return known
            asked_at = denials.clock()
        try:
            outcome = self.backend.run(key, self.algorithm.hit, cost)
        except RedisError:
            return self._degraded()  # the node counted it, and logged its outage or incident once
        decision = self._decision(outcome)
        if denials is not None and not outcome.allowed:
            any_cost = self.algorithm.denial_holds_for_any_cost
            denials.remember(key, decision, cost, asked_at, any_cost=any_cost)
        return decision

    def peek(self, identity: str) -> Decision:
        """Return what a hit of cost 1 would be told now, counting nothing.

        :raises BackendError: if Redis cannot answer.
        """
        if self.static is not None:
            return self._decision(self.static.outcome)
        try:
            outcome = self.backend.run(self.key(identity), self.algorithm.peek)
        except RedisError as exc:
            raise BackendError(f"could not read policy {self.name!r}: {exc}") from exc
        return self._decision(outcome)

    def reset(self, identity: str) -> int:
        """Forget ``identity``'s state under this policy; return the number of keys deleted.

        Also forgets the identity's entry in this process's deny cache; other
        processes keep denying until their own entry ends (see ``deny_cache.py``).

        :raises BackendError: if Redis cannot answer.
        """
        if self.static is not None:
            return 0  # no state: nothing to forget
        key = self.key(identity)
        try:
            return self.backend.run(key, self._delete)
        except RedisError as exc:
            raise BackendError(f"could not reset policy {self.name!r}: {exc}") from exc
        finally:
            if self.denials is not None:
                # After the delete, so a denial another thread got from Redis
                # just before it is forgotten too.
                self.denials.forget(key)

    def _delete(self, node: RedisNode, key: str) -> int:
        # An identity's keys share its hash tag: one slot, one node.
        return int(node.client.delete(*self.algorithm.keys(node, key)))

    def hit_request(self, request: Any, cost: int = 1) -> Decision | None:
        """Identify ``request`` and hit; ``None`` when the policy does not apply to it.

        For the front doors, which must never fail a request for its weight:
        a ``cost`` above the limit (``manage.py check`` reports it as
        ``django_rl.E014``) is denied without asking Redis, and logged once.
        Such a request could never be allowed; the Decision says
        ``remaining=0`` and, as ``retry_after``, the time the policy takes to
        grant its whole limit.

        A policy of ``rate: None`` applies to no request (``None``, without
        identifying it); one of ``"0/<period>"`` denies every request it
        applies to, whatever its cost, without Redis and without a log line.

        :raises ValueError: if ``cost`` is not a whole number of at least 1.
        """
        if self.unlimited:
            return None
        identity = self.identify(request)
        if identity is None:
            return None
        if type(cost) is int and cost > self.limit and self.static is None:
            return self._too_heavy(cost)
        return self.hit(identity, cost)

    def _check_cost(self, cost: int) -> None:
        if type(cost) is int and 1 <= cost <= self.limit:
            return  # the usual case, in one test (``type`` rules out bool)
        _check_whole(cost)
        raise ValueError(
            f"cost {short_repr(cost)} is above the limit {self.limit} of policy {self.name!r}: "
            "such a hit could never be allowed"
        )

    def _decision(self, outcome: Outcome) -> Decision:
        allowed, remaining, retry_after_ms, reset_after_ms = outcome
        # Positional: this runs on every decision, and keywords cost more.
        return Decision(
            allowed, self.limit, remaining, retry_after_ms / 1000, reset_after_ms / 1000, self.name
        )

    def _too_heavy(self, cost: int) -> Decision:
        _log_too_heavy(self.name, cost, self.limit)
        window = float(quota_window(self.algorithm) or 1)
        return Decision(False, self.limit, 0, window, window, self.name)

    def _degraded(self) -> Decision:
        return Decision(
            allowed=self.fail_open,
            limit=self.limit,
            remaining=self.limit if self.fail_open else 0,
            retry_after=0.0 if self.fail_open else DEGRADED_RETRY_AFTER,
            reset_after=0.0,
            policy=self.name,
            degraded=True,
        )


def _check_whole(cost: object) -> None:
    if type(cost) is not int or cost < 1:
        raise ValueError(f"cost must be a whole number of at least 1, not {short_repr(cost)}")


@functools.cache
def _log_too_heavy(name: str, cost: int, limit: int) -> None:
    """Log, once per process, that requests of ``cost`` under policy ``name`` are all denied."""
    logger.error(
        "Requests of cost %s are denied by rate-limit policy %r, whose limit is %d: "
        "lower the cost or raise the limit (django_rl.E014).",
        short_repr(cost),
        name,
        limit,
    )


@functools.cache
def get_policy(name: str) -> Policy:
    """Return the policy ``DJANGO_RL["POLICIES"][name]`` describes.

    Built on first use and kept until the settings change.

    :raises UnknownPolicy: if no policy has that name (the message lists the
        known ones).
    :raises ConfigurationError: if the policy's settings are wrong (the same
        problem ``manage.py check`` reports).
    """
    settings = get_settings()
    if name not in settings.policies:
        known = ", ".join(map(short_repr, sorted(settings.policies, key=short_repr))) or "none"
        raise UnknownPolicy(
            f"No rate-limit policy named {short_repr(name)}. Known policies: {known}",
            hint="Define it in settings.DJANGO_RL['POLICIES'].",
        )
    spec = settings.policies[name]
    problems = policy_problems(name, spec, num_proxies=settings.num_proxies)
    if problems:
        raise problems[0].as_exception()
    return Policy(
        name,
        ALGORITHMS[spec["algorithm"]].from_spec(spec),
        resolve_identity(spec.get("key", "user_or_ip"), addresses=settings.addresses),
        get_backend(settings.connection),
        key_prefix=settings.key_prefix,
        fail_open=spec.get("fail_open", settings.fail_open),
        denials=get_deny_cache(),
    )


@receiver(setting_changed)
def _forget_policies(*, setting: str, **kwargs: object) -> None:
    if setting in ("DJANGO_RL", "CACHES"):
        get_policy.cache_clear()
