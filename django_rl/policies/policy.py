"""A policy: an algorithm at a rate (or a rate per request), an identity function, its state.

Policies are made by the registry (``policies.py``): from settings, from
code (``register_policy``) and inline (``@ratelimit(rate=...)``).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

from redis.exceptions import RedisError

from django_rl.algorithms import Algorithm, Outcome, ParameterError, StaticAlgorithm, Unlimited
from django_rl.algorithms.base import new_tuple
from django_rl.algorithms.concurrency import Held
from django_rl.backends import Backend, RedisNode
from django_rl.backends.given_time import given_ms
from django_rl.core.decision import Decision
from django_rl.core.identities import IdentityFunction
from django_rl.core.keys import safe_identity, verbatim
from django_rl.core.rates import RateError
from django_rl.core.reprs import short_repr
from django_rl.exceptions import BackendError, ConfigurationError
from django_rl.leases import Lease
from django_rl.observability.denials import report_denial
from django_rl.observability.history import RECORDER, field_of
from django_rl.observability.metrics import (
    count_decision,
    count_decisions,
    count_deny_cache_answer,
    metrics,
)
from django_rl.overrides.loader import LOADER, rules_for
from django_rl.overrides.rules import BLOCK, EXEMPT, Rule
from django_rl.policies import reset_epoch
from django_rl.policies.deny_cache import DenyCache
from django_rl.policies.fallback import LocalFallback
from django_rl.policies.plans import (
    CATALOGUE_TTL_MS,
    PlanRates,
    Variant,
    catalogue_key,
    is_rate_function,
    make_variant,
)

#: Retry-After of a request denied because Redis is down and FAIL_OPEN is False.
DEGRADED_RETRY_AFTER = 1.0

logger = logging.getLogger("django_rl")


class Pending(NamedTuple):
    """A hit that only Redis can decide: what a policy needs to ask and to read the answer.

    :ivar key: the identity's base key at ``variant``.
    :ivar asked_at: the deny cache's clock when it was made (0.0 without one).
    """

    policy: Policy
    variant: Variant
    identity: str
    key: str
    cost: int
    asked_at: float


class Policy:
    """A limit: an algorithm at a rate, an identity function, and where state lives.

    Get one with :func:`get_policy`. ``identify(request)`` returns the
    identity a request counts as, or ``None`` if the policy does not apply to
    it. Methods that take an ``identity`` accept any string, taken as it is
    and made safe for a Redis key (see ``keys.safe_identity``): a request
    from 1.2.3.4 counts as ``"ip:1.2.3.4"`` (the ``ip`` key's identity,
    grouped by ``IPV4_PREFIX``), so ``hit("1.2.3.4")`` counts another client
    than requests from that address do (``manage.py ratelimit`` and the
    admin's override form, which take addresses, say what they count). ``denials`` is the
    process's deny cache (``None``: every hit asks Redis).

    **Per-plan rates.** Given ``rates`` instead of an ``algorithm``, the rate
    is chosen per request by a rate function, and every rate keeps its own
    state (see ``plans.py``). ``hit`` and ``peek`` then need the request
    (``request=``); ``algorithm``, ``limit``, ``fingerprint`` and ``key``,
    which belong to one rate, raise ``TypeError``.

    **Outage fallback.** Given ``fallback`` (the policy's ``fallback_rate``),
    what Redis cannot answer is decided in this process at that rate, one
    count per identity whatever the rate of the request (see
    ``fallback.py``); without it, by ``fail_open``.

    **Overrides** (``overrides/``), set from the admin, apply to ``hit``,
    ``hit_request`` and ``peek``: read from memory, never from the database,
    and without a round trip of their own. ``build(rate)`` makes the
    variant of another rate (the registry passes it), for rate overrides.
    """

    def __init__(
        self,
        name: str,
        algorithm: Algorithm | None,
        identify: IdentityFunction,
        backend: Backend,
        *,
        key_prefix: str,
        fail_open: bool,
        denials: DenyCache | None = None,
        rates: PlanRates | None = None,
        rate: str = "",
        extra: str = "",
        fallback: LocalFallback | None = None,
        build: Callable[[str], Variant] | None = None,
        shadow: bool = False,
    ) -> None:
        self.name = name
        #: Shadow mode: decide and count as usual, never deny (``Decision.shadow``).
        self.shadow = shadow
        self.identify: IdentityFunction = identify
        self.backend = backend
        self.key_prefix = key_prefix
        self.fail_open = fail_open
        self.denials = denials
        self.rates = rates
        self.fallback = fallback
        self._variant: Variant | None = None
        self._build = build
        #: Variants of rate overrides by rate, and the rates that make none.
        self._override_variants: dict[str, Variant] = {}
        self._bad_override_rates: set[str] = set()
        if algorithm is not None:
            text = rate or str(getattr(algorithm, "rate", ""))
            self._variant = make_variant(algorithm, text, prefix=key_prefix, name=name, extra=extra)
        elif rates is None:
            raise TypeError("a Policy needs an algorithm, or rates chosen per request")
        #: ``rate: None``: the front doors skip the policy (:meth:`hit_request`).
        self.unlimited = isinstance(algorithm, Unlimited)

    def __repr__(self) -> str:
        if self._variant is None:
            return f"<Policy {self.name!r}: rate per request from {self.rate}>"
        return f"<Policy {self.name!r}: {self._variant.algorithm.description}>"

    @property
    def rate(self) -> str:
        """Return the rate as configured: a rate string, or the rate function's name."""
        if self.rates is not None:
            return self.rates.label
        assert self._variant is not None
        return self._variant.rate

    @property
    def per_request(self) -> bool:
        """Return whether the rate is chosen per request (per-plan rates)."""
        return self._variant is None

    @property
    def algorithm(self) -> Algorithm:
        """Return the algorithm at the policy's rate (not for per-plan rates)."""
        return self._only().algorithm

    @property
    def limit(self) -> int:
        """Return the most hits of cost 1 allowed at once (not for per-plan rates)."""
        return self._only().limit

    @property
    def fingerprint(self) -> str:
        """Return the fingerprint of the policy's keys (not for per-plan rates)."""
        return self._only().fingerprint

    def _only(self) -> Variant:
        if self._variant is None:
            raise TypeError(
                f"policy {self.name!r} takes its rate from {self.rate} per request: it has "
                "an algorithm, limit and keys per rate (see Policy.variants())"
            )
        return self._variant

    def key(self, identity: str) -> str:
        """Return the base Redis key of ``identity`` under this policy (not for per-plan rates)."""
        variant = self._only()
        return variant.key_head + safe_identity(identity) + variant.key_tail

    def variant_key(self, variant: Variant, identity: str) -> str:
        """Return the base Redis key of ``identity`` at one of the policy's rates."""
        return variant.key_head + safe_identity(identity) + variant.key_tail

    def variants(self) -> list[Variant]:
        """Return the rates this process knows: the one rate, or those decided at so far.

        Also the rates of the policy's rate overrides now in force, and of
        those this process decided at.
        """
        self._build_override_variants()
        if self.rates is not None:
            return self.rates.known()
        assert self._variant is not None
        found = {self._variant.fingerprint: self._variant}
        for variant in self._override_variants.values():
            found.setdefault(variant.fingerprint, variant)
        return list(found.values())

    def override_variant(self, rate: str) -> Variant:
        """Return the variant of a rate override's ``rate``, built once per process.

        The policy's algorithm and parameters, at ``rate``: its own state,
        like each rate of a per-plan policy (for which it is one of them).

        :raises RateError, ParameterError: if ``rate`` does not make a valid policy.
        :raises TypeError: for a policy made without ``build`` (by hand).
        """
        found = self._override_variants.get(rate)
        if found is not None:
            return found
        if self.rates is not None:
            built = self.rates.variant(rate)
        elif self._build is not None:
            built = self._build(rate)
        else:
            raise TypeError(f"policy {self.name!r} was made without build=: it has one rate")
        return self._override_variants.setdefault(rate, built)

    def _rule_variant(self, rate: str) -> Variant | None:
        """Return the variant of a rate override, or ``None`` (logged once) if it cannot be made."""
        found = self._override_variants.get(rate)
        if found is not None:
            return found
        if rate in self._bad_override_rates:
            return None
        try:
            return self.override_variant(rate)
        except (RateError, ParameterError, TypeError) as exc:
            self._bad_override_rates.add(rate)
            _log_bad_override(self.name, rate, str(exc))
            return None

    def _build_override_variants(self) -> None:
        rules = rules_for(self.name)
        if rules is not None:
            for rate in rules.rates():
                self._rule_variant(rate)

    def variant_for(self, request: Any) -> Variant | None:
        """Return the variant that applies to ``request``; ``None`` when no rate does.

        :raises ConfigurationError: if the rate function returns something that
            is not a valid rate (``django_rl.E007``).
        """
        if self._variant is not None:
            return self._variant
        assert self.rates is not None
        rate = self.rates.rate_for(request)
        if rate is None:
            return None
        if not isinstance(rate, str) or is_rate_function(rate):
            raise self._bad_rate(rate, "it must return a rate string such as '100/h', or None")
        try:
            return self.rates.variant(rate)
        except (RateError, ParameterError) as exc:
            raise self._bad_rate(rate, str(exc)) from exc

    def _bad_rate(self, rate: object, why: str) -> ConfigurationError:
        return ConfigurationError(
            f"rate function {self.rate} of policy {self.name!r} returned {rate!r}: {why}",
            check_id="django_rl.E007",
            hint="Return '<count>/<period>' (e.g. '100/h') or None (no limit for that request).",
        )

    def _variant_of(self, request: Any, method: str) -> Variant | None:
        if self._variant is not None:
            return self._variant
        if request is None:
            raise TypeError(
                f"Policy.{method}() of {self.name!r} needs request=: its rate comes from "
                f"{self.rate}, a function of the request"
            )
        return self.variant_for(request)

    def hit(
        self, identity: str, cost: int = 1, *, request: Any = None, also: str | None = None
    ) -> Decision:
        """Count a hit of weight ``cost`` for ``identity`` and decide (see :meth:`_hit_identity`).

        A policy in shadow mode returns the same Decision with ``shadow=True``
        (but an override's block, enforced in every mode: :meth:`shadowed`).

        :param also: another identity the hit stands for, which overrides are
            matched against when none is for ``identity`` itself (the DRF
            drop-in counts by cache key, ``throttle_anon_<address>``, and
            passes the ``ip:`` identity of that address, so an override of an
            address or network applies). It is not counted.
        """
        made: Any = self._hit_identity(identity, cost, request=request, also=also)
        return self.report(identity, made, also=also)

    def prepare(self, identity: str, cost: int = 1, *, request: Any = None) -> Pending | Decision:
        """Return the hit that Redis must decide, or its Decision when none is needed.

        As :meth:`hit` up to the round trip (overrides, static rates, the
        deny cache, the cost's checks), for callers that decide several
        policies' hits together (``engine.py``). Give the Decision made of
        it (:meth:`answered`, :meth:`unanswered`) to :meth:`report`.
        """
        return self._hit_identity(identity, cost, request=request, defer=True)

    def report(self, identity: str, decision: Decision, *, also: str | None = None) -> Decision:
        """Return ``decision`` marked for shadow mode, counted in the metrics and history.

        :param also: as for :meth:`hit` (a block of it is enforced in shadow mode too).
        """
        if self.shadow:
            decision = self.shadowed(identity, decision, also=also)
        count_decision(self.name, decision)
        # history.record, inline: this runs on every decision.
        RECORDER.count(self.name, "a" if decision.allowed else field_of(decision), identity)
        return decision

    def shadowed(self, identity: str, decision: Decision, *, also: str | None = None) -> Decision:
        """Return ``decision`` of a policy in shadow mode marked ``shadow=True``.

        Except an operator's block (an override of ``identity``, or of
        ``also`` as :meth:`hit` takes it): it is enforced in every mode,
        shadow and ``SHADOW`` included.
        """
        if not decision.allowed:
            rules = rules_for(self.name)
            rule = rules.match(identity) if rules is not None else None
            if rule is None and rules is not None and also is not None:
                rule = rules.match(also)
            if rule is not None and rule.action == BLOCK:
                return decision
        return replace(decision, shadow=True)

    def _hit_identity(
        self,
        identity: str,
        cost: int = 1,
        *,
        request: Any = None,
        defer: bool = False,
        also: str | None = None,
    ) -> Decision | Pending:
        """Count a hit of weight ``cost`` for ``identity`` and decide, in one round trip.

        Never raises for Redis trouble: if Redis cannot answer (no answer, or
        an error reply), the decision is made in this process at the policy's
        ``fallback_rate``, or else follows ``fail_open``, and has
        ``degraded=True``. A hit Redis has
        already denied until a known time is answered by the deny cache,
        without Redis (see ``deny_cache.py``).

        :param request: the request, whose rate a per-plan policy asks its
            rate function for (ignored by a policy with one rate). When the
            function returns ``None``, nothing is counted and the Decision is
            allowed with ``limit`` 0: no limit applies.
        An override of ``identity`` (see ``overrides/``) applies: another
        rate, an exemption (allowed, ``limit`` 0, no Redis call) or a block
        (denied, no Redis call).

        :param defer: return the :class:`Pending` hit instead of asking Redis.
        :param also: as for :meth:`hit`.
        :raises TypeError: for a per-plan policy without ``request``.
        :raises ValueError: if ``cost`` is not a whole number from 1 to the limit
            (a hit heavier than the limit could never be allowed).
        """
        # rules_for, inline: this runs on every decision.
        rules = LOADER.rules.get(self.name) if LOADER.started else rules_for(self.name)
        variant: Variant | None
        rule = None
        if rules is not None:
            rule = rules.match(identity)
            if rule is None and also is not None:
                rule = rules.match(also)
        if rule is not None:
            if rule.action == EXEMPT:
                return self._unlimited()
            if rule.action == BLOCK:
                return self._blocked(rule, self._variant_of(request, "hit"))
            variant = self._rule_variant(rule.rate) or self._variant_of(request, "hit")
        elif self._variant is not None:
            variant = self._variant
        else:
            variant = self._variant_of(request, "hit")
        if variant is None:
            return self._unlimited()
        if isinstance(variant.algorithm, StaticAlgorithm):
            return self._without_redis(self._static(variant, cost))
        if type(cost) is not int or not 1 <= cost <= variant.limit:  # (the usual case, inline)
            self._check_cost(variant, cost)
        pending = self._pending(variant, identity, cost)
        if type(pending) is Pending:
            return pending if defer else self.ask(pending)
        return self._without_redis(pending)  # type: ignore[arg-type]  # the deny cache's

    def _without_redis(self, decision: Decision) -> Decision:
        """Return a Decision made without Redis (a static rate's, the deny cache's, a cost
        above the limit), marked shadow for a policy in shadow mode.

        Marked now, so that ``together.decide`` lets only enforced denials keep
        a request's other policies from counting it; an operator's block is
        never marked (it is enforced in every mode, and vetoes).
        """
        return replace(decision, shadow=True) if self.shadow else decision

    def ask(self, pending: Pending) -> Decision:
        """Count ``pending`` in Redis and decide in one round trip (degraded if Redis cannot)."""
        algorithm = pending.variant.algorithm
        measured = metrics()
        try:
            if measured is None:
                outcome = self.backend.run(pending.key, algorithm.hit, pending.cost)
            else:
                began = time.perf_counter()
                outcome = self.backend.run(pending.key, algorithm.hit, pending.cost)
                measured.pending.observe(time.perf_counter() - began)
        except RedisError:
            # The node counted it, and logged its outage or incident once.
            return self.unanswered(pending)
        return self.answered(pending, outcome)

    def _pending(self, variant: Variant, identity: str, cost: int) -> Pending | Decision:
        """Return the hit Redis must decide, or the deny cache's Decision for it."""
        # safe_identity, its usual case inline (a plain str kept verbatim):
        # this, like the rest of this method, runs on every decision.
        if type(identity) is not str or verbatim(identity) is None:
            identity_in_key = safe_identity(identity)
        else:
            identity_in_key = identity
        key = variant.key_head + identity_in_key + variant.key_tail
        denials = self.denials
        if denials is None or given_ms() is not None:
            # (A given time: the deny cache keeps this process's time, not that one.)
            return new_tuple(Pending, (self, variant, identity, key, cost, 0.0))
        if denials.holds(key) is not None:
            known = denials.lookup(key, cost)
            if known is not None:
                count_deny_cache_answer(self.name)
                return known
        return new_tuple(Pending, (self, variant, identity, key, cost, denials.clock()))

    def answered(self, pending: Pending, outcome: Outcome, *, counted: bool = True) -> Decision:
        """Return the Decision of Redis's ``outcome`` for ``pending``.

        :param counted: whether the hit was counted (``False``: Redis only
            looked, because another policy of the request denied it). A
            denial is remembered by the deny cache either way: it is the
            policy's own state that denies.
        """
        variant = pending.variant
        fallback = self.fallback
        if fallback is not None and fallback.store.deciding:
            fallback.store.redis_answered()  # local decisions end: Redis counts again
        allowed, remaining, retry_after_ms, reset_after_ms = outcome
        # Positional: this runs on every decision, and keywords cost more.
        decision = Decision(
            allowed,
            variant.limit,
            remaining,
            retry_after_ms / 1000,
            reset_after_ms / 1000,
            self.name,
            False,
            variant.window,
        )
        if type(outcome) is Held:
            # A concurrency hit that took slots (only a counted one does).
            lease = Lease(self.backend, pending.key, outcome.token, pending.cost, self.name)
            decision = replace(decision, lease=lease)
        if (
            self.denials is not None
            and not allowed
            and pending.asked_at  # 0.0: not asked of the deny cache (a given time)
            and getattr(variant.algorithm, "cache_denials", True)
        ):
            any_cost = variant.algorithm.denial_holds_for_any_cost
            self.denials.remember(
                pending.key, decision, pending.cost, pending.asked_at, any_cost=any_cost
            )
        if counted and self.rates is not None and self.rates.due(variant):
            self._record_rate(variant)
        return decision

    def unanswered(self, pending: Pending) -> Decision:
        """Return the Decision for ``pending`` when Redis could not answer (degraded)."""
        if self.fallback is not None:
            return self.fallback.hit(pending.identity, pending.cost)
        return self._degraded(pending.variant)

    def peek(self, identity: str, *, request: Any = None) -> Decision:
        """Return what a hit of cost 1 would be told now, counting nothing (see :meth:`_peek`).

        A policy in shadow mode returns the same Decision with ``shadow=True``.
        """
        decision = self._peek(identity, request=request)
        return self.shadowed(identity, decision) if self.shadow else decision

    def _peek(self, identity: str, *, request: Any = None) -> Decision:
        """Return what a hit of cost 1 would be told now, counting nothing.

        Never raises for Redis trouble: if Redis cannot answer, the answer is
        what the policy's outage fallback would tell (its local count), or
        else follows ``fail_open``, with ``degraded=True``, as :meth:`hit`.

        :param request: as for :meth:`hit`.
        :raises TypeError: for a per-plan policy without ``request``.
        """
        rules = rules_for(self.name)
        rule = rules.match(identity) if rules is not None else None
        if rule is not None and rule.action == EXEMPT:
            return self._unlimited()
        if rule is not None and rule.action == BLOCK:
            return self._blocked(rule, self._variant_of(request, "peek"))
        variant = self._rule_variant(rule.rate) if rule is not None else None
        variant = variant or self._variant_of(request, "peek")
        if variant is None:
            return self._unlimited()
        if isinstance(variant.algorithm, StaticAlgorithm):
            return self._static(variant, 1)
        key = self.variant_key(variant, identity)
        try:
            allowed, remaining, retry_ms, reset_ms = self.backend.run(key, variant.algorithm.peek)
        except RedisError:
            if self.fallback is not None:
                return self.fallback.peek(identity)
            return self._degraded(variant)
        return Decision(
            allowed, variant.limit, remaining, retry_ms / 1000, reset_ms / 1000, self.name,
            False, variant.window,
        )  # fmt: skip

    def reset(self, identity: str) -> int:
        """Forget ``identity``'s state under this policy, at every rate; return the keys deleted.

        A per-plan policy finds its rates in the rate catalogue (``plans.py``)
        and in this process. Also forgets the identity's entries in this
        process's deny cache and its count in this process's outage fallback
        (even when Redis cannot answer). Other processes' deny caches drop
        their entries within 1 s (the reset token, ``reset_epoch.py``); their
        outage fallbacks keep their counts (``fallback.py``).

        :raises BackendError: if Redis cannot answer.
        """
        try:
            variants = self.recorded_variants() if self.rates is not None else self.variants()
            # Static rates (None, "0/<period>") keep no state.
            variants = [v for v in variants if not isinstance(v.algorithm, StaticAlgorithm)]
            keys = [self.variant_key(variant, identity) for variant in variants]
            if not keys:
                return 0
            # An identity's keys share its hash tag: one slot, one node.
            deleted: int = self.backend.run(keys[0], self._delete, variants, keys)
            # After the delete: other processes' deny caches drop what they
            # remembered within reset_epoch.CHECK_INTERVAL (see deny_cache.py).
            reset_epoch.bump()
            return deleted
        except RedisError as exc:
            raise BackendError(f"could not reset policy {self.name!r}: {exc}") from exc
        finally:
            if self.fallback is not None:
                self.fallback.forget(identity)
            if self.denials is not None:
                # After the delete, so a denial another thread got from Redis
                # just before it is forgotten too.
                for variant in self.variants():
                    self.denials.forget(self.variant_key(variant, identity))

    def _delete(self, node: RedisNode, first: str, variants: list[Variant], keys: list[str]) -> int:
        names = [
            name
            for variant, key in zip(variants, keys, strict=True)
            for name in variant.algorithm.keys(node, key)
        ]
        # An identity's keys share its hash tag: one slot, one node. One DEL
        # per key, in one round trip: while a Redis Cluster moves the slot,
        # some keys may still be on the source and others on the target, and
        # a DEL of several would be refused (TRYAGAIN); each key's DEL follows
        # its own redirect instead.
        _, deleted = node.pipeline(lambda pipe: [pipe.delete(name) for name in names])
        return sum(int(count) for count in deleted)

    def recorded_variants(self) -> list[Variant]:
        """Return every rate whose state may exist: the catalogue's and this process's.

        A catalogue entry of an earlier configuration (another fingerprint for
        the rate now) is left out: no decision reads its state.

        :raises redis.exceptions.RedisError: if Redis cannot answer.
        """
        if self.rates is None:
            return self.variants()
        key = catalogue_key(self.key_prefix, self.name)
        entries = self.backend.run(key, _read_catalogue)
        found = {v.fingerprint: v for v in self.variants()}
        for fingerprint, rate in entries.items():
            if fingerprint in found:
                continue
            try:
                variant = self.rates.variant(rate)
            except (RateError, ParameterError):
                continue
            if variant.fingerprint == fingerprint:
                found[fingerprint] = variant
        return list(found.values())

    def note_rate(self, variant: Variant) -> None:
        """Record ``variant``'s rate in the rate catalogue when it is due (per-plan policies).

        For callers that count through ``backend.run`` themselves (the
        django-ratelimit drop-in), so that other processes (the admin,
        ``manage.py ratelimit``) can read their state as :meth:`hit` leaves it.
        """
        if self.rates is not None and self.rates.due(variant):
            self._record_rate(variant)

    def _record_rate(self, variant: Variant) -> None:
        assert self.rates is not None
        key = catalogue_key(self.key_prefix, self.name)
        try:
            self.backend.run(key, _write_catalogue, variant.fingerprint, variant.rate)
        except RedisError:
            self.rates.recorded(variant, ok=False)  # tried again in a few seconds
            return
        self.rates.recorded(variant, ok=True)

    def hit_request(self, request: Any, cost: int = 1) -> Decision | None:
        """Identify ``request`` and hit; ``None`` when the policy does not apply to it.

        See :meth:`_hit_request`. A denial (an enforced one, or a shadow
        policy's would-be denial, marked ``shadow=True``) is reported: the
        ``rate_limited`` signal and a line on the ``django_rl.denials`` logger
        (``observability/denials.py``).
        """
        if self.unlimited:
            return None
        identity = self.identify(request)
        if identity is None:
            return None
        decision: Decision | None = self._hit_request(request, identity, cost)  # type: ignore[assignment]
        if decision is None:
            return None
        # report_request, inline: this runs on every request a front door decides.
        decision = self.report(identity, decision)
        if not decision.allowed:
            report_denial(request, self.name, identity, decision)
        return decision

    def prepare_request(self, request: Any, cost: int = 1) -> tuple[str, Pending | Decision] | None:
        """Return the identity and the hit Redis must decide (or its Decision); ``None``: no limit.

        :meth:`hit_request` up to the round trip (see :meth:`prepare`); give
        the Decision to :meth:`report_request`. (Policies of one request that
        share an identity function are identified once, then each one's hit
        made by :meth:`_hit_request` with ``defer=True``: ``engine.py``.)
        """
        if self.unlimited:
            return None
        identity = self.identify(request)
        if identity is None:
            return None
        made = self._hit_request(request, identity, cost, defer=True)
        return None if made is None else (identity, made)

    def report_request(self, request: Any, identity: str, decision: Decision) -> Decision:
        """As :meth:`report`, and report a denial (the signal, the denials log)."""
        decision = self.report(identity, decision)
        if not decision.allowed:
            report_denial(request, self.name, identity, decision)
        return decision

    def _hit_request(
        self, request: Any, identity: str, cost: int, *, defer: bool = False
    ) -> Decision | Pending | None:
        """Hit for ``request``, counted as ``identity``; ``None`` when no limit applies.

        It does not apply when the identity function returns ``None``, or a
        per-plan rate function does. For the front doors, which must never
        fail a request for its weight: a ``cost`` above the limit (``manage.py
        check`` reports it as ``django_rl.E014`` where the limit is known
        before requests) is denied without asking Redis, and logged once. Such
        a request could never be allowed; the Decision says ``remaining=0``
        and, as ``retry_after``, the time the policy takes to grant its whole
        limit.

        A policy of ``rate: None`` applies to no request (``None``, without
        identifying it); a rate of ``"0/<period>"`` denies every request it
        applies to, whatever its cost, without Redis and without a log line.

        :raises ValueError: if ``cost`` is not a whole number of at least 1.
        """
        rules = LOADER.rules.get(self.name) if LOADER.started else rules_for(self.name)
        variant: Variant | None
        if rules is not None and (rule := rules.match(identity)) is not None:
            if rule.action == EXEMPT:
                return None  # no limit applies: no Decision, no headers
            if rule.action == BLOCK:
                return self._blocked(rule, self._variant or self.variant_for(request))
            variant = self._rule_variant(rule.rate) or self._variant or self.variant_for(request)
        else:
            variant = self._variant if self._variant is not None else self.variant_for(request)
        if variant is None:
            return None
        if type(cost) is int and cost > variant.limit:
            # Static rates have limit 0: checked here, off the usual path.
            if isinstance(variant.algorithm, StaticAlgorithm):
                return self._without_redis(self._static(variant, cost))
            return self._without_redis(self._too_heavy(variant, cost))
        if type(cost) is not int or cost < 1:  # (the usual case, inline)
            self._check_cost(variant, cost)
        pending = self._pending(variant, identity, cost)
        if type(pending) is Pending:
            return pending if defer else self.ask(pending)
        return self._without_redis(pending)  # type: ignore[arg-type]  # the deny cache's

    def _check_cost(self, variant: Variant, cost: int) -> None:
        if type(cost) is int and 1 <= cost <= variant.limit:
            return  # the usual case, in one test (``type`` rules out bool)
        if type(cost) is not int or cost < 1:
            raise ValueError(f"cost must be a whole number of at least 1, not {short_repr(cost)}")
        raise ValueError(
            f"cost {short_repr(cost)} is above the limit {variant.limit} of policy {self.name!r}: "
            "such a hit could never be allowed"
        )

    def _too_heavy(self, variant: Variant, cost: int) -> Decision:
        _log_too_heavy(self.name, cost, variant.limit)
        window = float(variant.window or 1)
        return Decision(False, variant.limit, 0, window, window, self.name, False, variant.window)

    def _unlimited(self) -> Decision:
        return Decision(True, 0, 0, 0.0, 0.0, self.name)

    def _static(self, variant: Variant, cost: int) -> Decision:
        """Return the Decision of a static rate (``None`` allows, ``"0/<period>"`` denies)."""
        if type(cost) is not int or cost < 1:
            raise ValueError(f"cost must be a whole number of at least 1, not {short_repr(cost)}")
        assert isinstance(variant.algorithm, StaticAlgorithm)
        allowed, remaining, retry_ms, reset_ms = variant.algorithm.outcome
        return Decision(
            allowed, variant.limit, remaining, retry_ms / 1000, reset_ms / 1000, self.name,
            False, variant.window,
        )  # fmt: skip

    def _blocked(self, rule: Rule, variant: Variant | None) -> Decision:
        """Return the Decision of a block: denied until the override expires (capped)."""
        wait = rule.retry_after(time.time())
        if variant is None:  # a per-plan policy whose rate function said "no limit"
            return Decision(False, 0, 0, wait, wait, self.name)
        return Decision(False, variant.limit, 0, wait, wait, self.name, False, variant.window)

    def _degraded(self, variant: Variant) -> Decision:
        return Decision(
            allowed=self.fail_open,
            limit=variant.limit,
            remaining=variant.limit if self.fail_open else 0,
            retry_after=0.0 if self.fail_open else DEGRADED_RETRY_AFTER,
            reset_after=0.0,
            policy=self.name,
            degraded=True,
            window=variant.window,
        )


def _read_catalogue(node: RedisNode, key: str) -> dict[str, str]:
    entries = node.client.hgetall(key)
    return {_text(k): _text(v) for k, v in entries.items()}


def _write_catalogue(node: RedisNode, key: str, fingerprint: str, rate: str) -> None:
    # Every writer sets the same long TTL, so no write shortens another's.
    node.client.transaction_replies(
        (("HSET", key, fingerprint, rate), ("PEXPIRE", key, CATALOGUE_TTL_MS))
    )


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


@functools.cache
def _log_bad_override(name: str, rate: str, why: str) -> None:
    """Log, once per process, that a rate override of policy ``name`` cannot apply."""
    logger.error(
        "A rate override of rate-limit policy %r at %r cannot apply (%s); the policy's own "
        "rate decides instead. Change the override in the admin.",
        name,
        rate,
        why,
    )


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


def report_requests(
    request: Any, reported: Sequence[tuple[Policy, str, Decision]]
) -> list[Decision]:
    """Return :meth:`Policy.report_request` of each ``(policy, identity, decision)``, in order.

    For the Decisions of one request of several policies: they are counted
    in the metrics and the history together (one lock each, one clock read),
    then each denial is reported.
    """
    decisions = [
        policy.shadowed(identity, decision) if policy.shadow else decision
        for policy, identity, decision in reported
    ]
    count_decisions(
        [(policy.name, d) for (policy, _, _), d in zip(reported, decisions, strict=True)]
    )
    RECORDER.count_many(
        [
            (policy.name, "a" if d.allowed else field_of(d), identity)
            for (policy, identity, _), d in zip(reported, decisions, strict=True)
        ]
    )
    for (policy, identity, _), decision in zip(reported, decisions, strict=True):
        if not decision.allowed:
            report_denial(request, policy.name, identity, decision)
    return decisions
