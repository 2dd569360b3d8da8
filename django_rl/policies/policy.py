"""A policy: an algorithm at a rate (or a rate per request), an identity function, its state.

Policies are made by the registry (``registry.py``): from settings, from
code (``register_policy``) and inline (``@ratelimit(rate=...)``).

**One decision.** Every hit, whoever asks (``hit``, ``prepare``, the front
doors' ``hit_request`` and ``prepare_request``), takes the same two steps,
then Redis (or not):

1. :meth:`Policy._select`, which rate decides: an operator's override of
   the identity (an exemption: no limit; a block: denied, no Redis; another
   rate), else the policy's rate, or the rate its function picks for the
   request (``None``: no limit);
2. the preparation (in :meth:`Policy._decide` itself), the hit at that
   rate: a static rate's answer, a cost above the limit
   (``outcomes.too_heavy``: one documented behaviour), the deny cache's
   answer, or a :class:`Pending` hit that only Redis can decide:
   :meth:`Policy.ask` (one round trip), or ``together.py`` with the
   request's other policies.

``peek`` takes step 1 too. The Decision is then reported once
(``reporting.py``).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from asgiref.sync import sync_to_async
from redis.exceptions import RedisError

from django_rl.algorithms import Outcome, StaticAlgorithm
from django_rl.algorithms.base import new_tuple
from django_rl.algorithms.concurrency import Held
from django_rl.algorithms.quota import Periodic
from django_rl.backends.given_time import given_ms
from django_rl.core.decision import Decision
from django_rl.core.keys import safe_identity, verbatim
from django_rl.core.switches import LIMITS
from django_rl.leases import Lease
from django_rl.observability.denials import areport_denial, report_denial
from django_rl.observability.history import RECORDER, field_of
from django_rl.observability.metrics import count_decision, count_deny_cache_answer, metrics
from django_rl.overrides.loader import LOADER, rules_for
from django_rl.overrides.rules import BLOCK, EXEMPT
from django_rl.policies import outcomes
from django_rl.policies.outcomes import DEGRADED_RETRY_AFTER
from django_rl.policies.peeking import apeek_identity, peek_identity
from django_rl.policies.pending import Pending
from django_rl.policies.plans import Variant
from django_rl.policies.points import PointsMixin, denied
from django_rl.policies.reporting import shadowed
from django_rl.policies.resetting import areset_identity, reset_identity
from django_rl.policies.rollout import outside
from django_rl.policies.shape import PolicyShape

__all__ = ["DEGRADED_RETRY_AFTER", "Pending", "Policy"]


class Policy(PointsMixin, PolicyShape):
    """A limit: an algorithm at a rate, an identity function, and where state lives.

    Get one with :func:`get_policy`. ``identify(request)`` returns the
    identity a request counts as, or ``None`` if the policy does not apply to
    it. Methods that take an ``identity`` accept any string, taken as it is
    and made safe for a Redis key (see ``keys.safe_identity``): a request
    from 1.2.3.4 counts as ``"ip:1.2.3.4"`` (the ``ip`` key's identity,
    grouped by ``IPV4_PREFIX``), so ``hit("1.2.3.4")`` counts another client
    than requests from that address do (``manage.py ratelimit`` and the
    admin's override form, which take addresses, say what they count).
    ``denials`` is the process's deny cache (``None``: every hit asks Redis).

    **Per-plan rates.** Given ``rates`` instead of an ``algorithm``, the rate
    is chosen per request by a rate function, and every rate keeps its own
    state (see ``plans.py``). ``hit`` and ``peek`` then need the request
    (``request=``); ``algorithm``, ``limit``, ``fingerprint`` and ``key``,
    which belong to one rate, raise ``TypeError``.

    **Outage fallback.** Given ``fallback`` (the policy's ``fallback_rate``),
    what Redis cannot answer is decided in this process at that rate, one
    count per identity whatever the rate of the request (see
    ``fallback.py``); without it, by ``fail_open``.

    **Overrides** (``overrides/``), set from the admin, apply to every hit
    and to ``peek``: read from memory, never from the database, and without
    a round trip of their own. ``build(rate)`` makes the variant of another
    rate (the registry passes it), for rate overrides.
    """

    # -- deciding --------------------------------------------------------

    def hit(
        self, identity: str, cost: int = 1, *, request: Any = None, also: str | None = None
    ) -> Decision:
        """Count a hit of weight ``cost`` for ``identity`` and decide, in one round trip.

        Never raises for Redis trouble: if Redis cannot answer, the decision
        is made in this process at the policy's ``fallback_rate``, or else
        follows ``fail_open``, and has ``degraded=True``. A hit Redis has
        already denied until a known time is answered by the deny cache,
        without Redis (``deny_cache.py``). An override of ``identity`` applies
        (another rate; an exemption: allowed, ``limit`` 0; a block: denied),
        without Redis for the last two. A policy in shadow mode returns the
        same Decision with ``shadow=True`` (but an operator's block). While
        limits are off (``rate_limits_disabled``): allowed, ``limit`` 0,
        without Redis, counted nowhere (not in the metrics either).

        :param request: the request, whose rate a per-plan policy asks its
            rate function for; when it returns ``None``, nothing is counted and
            the Decision is allowed with ``limit`` 0.
        :param also: another identity the hit stands for, which overrides are
            matched against when none is for ``identity`` itself (the DRF
            drop-in counts by cache key and passes the ``ip:`` identity of
            its address, so an override of an address applies). Not counted.
        :raises TypeError: for a per-plan policy without ``request``.
        :raises ValueError: if ``cost`` is not a whole number from 1 to the
            limit (a per-plan rate's limit, known only now, denies instead).
        """
        made = self._decide(identity, cost, request, also, self.rates is None, False)
        if made is None:
            if LIMITS.off:  # rate_limits_disabled: nothing counted, not even in the metrics
                return outcomes.no_limit(self.name)
            made = outcomes.no_limit(self.name)
        return self.report(identity, made, also=also)  # type: ignore[arg-type]  # asked

    async def ahit(self, identity: str, cost: int = 1, *, request: Any = None) -> Decision:
        """:meth:`hit` on the event loop: ``_decide``'s steps, the round trip awaited (``aask``)."""
        waiting = self.aready()
        if waiting is not None:
            await waiting
        made = self._decide(identity, cost, request, None, self.rates is None, True)
        if type(made) is Pending:
            made = await self.aask(made)
        if made is None:
            if LIMITS.off:  # rate_limits_disabled: nothing counted, not even in the metrics
                return outcomes.no_limit(self.name)
            made = outcomes.no_limit(self.name)
        return self.report(identity, made)  # type: ignore[arg-type]  # asked

    def prepare(self, identity: str, cost: int = 1, *, request: Any = None) -> Pending | Decision:
        """Return :meth:`hit` up to the round trip: the hit Redis must decide, or its Decision.

        For callers that decide several policies' hits together
        (``engine.py``); give the Decision made of it (:meth:`answered`,
        :meth:`unanswered`) to :meth:`report`.
        """
        made = self._decide(identity, cost, request, None, self.rates is None, True)
        return made or outcomes.no_limit(self.name)

    def hit_request(
        self, request: Any, cost: int = 1, *, identity: str | None = None
    ) -> Decision | None:
        """Hit for ``request`` (identified, unless ``identity`` is given); ``None``: no limit.

        The front doors' :meth:`hit`: no limit applies (``None``) when the
        identity function returns ``None``, a per-plan rate function does, an
        override exempts the identity, or the rate is ``None``. A request is
        never failed for its weight: a cost above the limit is denied
        (``outcomes.too_heavy``). A denial (or a shadow policy's would-be
        denial) is reported: the ``rate_limited`` signal and a line on the
        ``django_rl.denials`` logger (``observability/denials.py``).

        :raises ValueError: if ``cost`` is not a whole number of at least 1.
        """
        # prepare_request's steps, then ask (in _decide): one frame fewer on every decision.
        if self.limits_nothing:
            return None
        if identity is None:
            identity = self.identify(request)
            if identity is None:
                return None
        made = self._decide(identity, cost, request, None, False, False)
        if made is None:
            return None
        decision = self.report(identity, made)  # type: ignore[arg-type]  # asked
        if not decision.allowed:
            report_denial(request, self.name, identity, decision)
        return decision

    async def ahit_request(self, request: Any, cost: int = 1, *, identity: str) -> Decision | None:
        """:meth:`hit_request` on the event loop, for an identity found (``aidentify``); a
        denial reported by ``areport_denial`` (``Signal.asend_robust``)."""
        waiting = self.aready()
        if waiting is not None:
            await waiting
        prepared = self.prepare_request(request, cost, identity=identity)
        if prepared is None:
            return None
        identity, made = prepared
        if type(made) is Pending:
            made = await self.aask(made)
        decision = self.report(identity, made)  # type: ignore[arg-type]  # asked
        if not decision.allowed:
            await areport_denial(request, self.name, identity, decision)
        return decision

    def prepare_request(
        self, request: Any, cost: int = 1, *, identity: str | None = None
    ) -> tuple[str, Pending | Decision] | None:
        """Return :meth:`hit_request` up to the round trip: the identity and the hit (or Decision).

        ``None``: no limit applies. Give the Decision to :meth:`report`, and report
        a denial as :meth:`hit_request` does (``reporting.report_requests``).
        """
        if self.limits_nothing:
            return None
        if identity is None:
            identity = self.identify(request)
            if identity is None:
                return None
        made = self._decide(identity, cost, request, None, False, True)
        return None if made is None else (identity, made)

    def _decide(
        self,
        identity: str,
        cost: int,
        request: Any,
        also: str | None,
        strict: bool,
        defer: bool,
    ) -> Decision | Pending | None:
        """The one decision of a hit: select the rate, prepare the hit, ask (unless ``defer``).

        ``None``: no limit applies, also to every hit while limits are off
        (``core/switches.py``: ``rate_limits_disabled``; no Redis, nothing
        counted). ``strict``: a cost above the policy's own limit raises (the
        programmatic API), see ``outcomes.too_heavy``. (One frame for both
        steps, arguments all positional: this runs on every decision, and
        each frame or keyword costs.)
        """
        if LIMITS.off:
            return None
        # Step 1, selection (:meth:`_select`): the rate, a block's Decision, or no limit.
        variant = self._variant
        # (Else one rate and no override: LOADER.consulted is False once the
        # loader runs and no policy has overrides, the usual case.)
        if variant is None or (LOADER.consulted and rules_for(self.name) is not None):
            selected = self._select(identity, request, also, "hit")
            if not isinstance(selected, Variant):
                return selected  # a block's Decision, or None
            variant = selected
        # Step 2, preparation: the hit Redis must decide, or its Decision made without Redis.
        if type(cost) is not int or not 1 <= cost <= variant.limit:
            return self._unusual_cost(variant, cost, strict, identity)
        # safe_identity, its usual case first (a plain str kept verbatim).
        if type(identity) is not str or verbatim(identity) is None:
            identity_in_key = safe_identity(identity)
        else:
            identity_in_key = identity
        key = variant.key_head + identity_in_key + variant.key_tail
        denials = self.denials
        if denials is None or given_ms() is not None:
            # (A given time: the deny cache keeps this process's time, not that one.)
            pending = new_tuple(Pending, (self, variant, identity, key, cost, 0.0, request))
        else:
            if denials.holds(key) is not None:
                known = denials.lookup(key, cost)
                if known is not None:
                    count_deny_cache_answer(self.name)
                    return self._without_redis(known, identity)
            pending = new_tuple(
                Pending, (self, variant, identity, key, cost, denials.clock(), request)
            )
        return pending if defer else self.ask(pending)

    def _select(
        self, identity: str, request: Any, also: str | None, method: str
    ) -> Variant | Decision | None:
        """Step 1: the rate deciding ``identity``, a block's Decision, or ``None`` (no limit)."""
        rules = rules_for(self.name)
        if rules is not None:
            rule = rules.match(identity)
            if rule is None and also is not None:
                rule = rules.match(also)
            if rule is not None:
                if rule.action == EXEMPT:
                    return None
                if rule.action == BLOCK:  # enforced in every mode: never marked shadow
                    return outcomes.blocked(self.name, rule, self._rate_of(request, method))
                overridden = self._overrides.usable(rule.rate)
                if overridden is not None:
                    return overridden
        if self._variant is not None:
            return self._variant
        return self._rate_of(request, method)

    def _rate_of(self, request: Any, method: str) -> Variant | None:
        if self._variant is not None:
            return self._variant
        if request is None:
            raise TypeError(
                f"Policy.{method}() of {self.name!r} needs request=: its rate comes from "
                f"{self.rate}, a function of the request"
            )
        return self.variant_for(request)

    def _unusual_cost(self, variant: Variant, cost: Any, strict: bool, identity: str) -> Decision:
        """Step 2 for a cost not from 1 to the limit: a static rate's Decision, or too heavy.

        Static rates have limit 0: always here.

        :raises ValueError: for a cost that is not a whole number of at least 1,
            or (``strict``, the policy's own limit) above the limit.
        """
        if isinstance(variant.algorithm, StaticAlgorithm):
            return self._without_redis(outcomes.static(self.name, variant, cost), identity)
        if type(cost) is not int or cost < 1:  # (``type`` rules out bool)
            raise outcomes.bad_cost(cost)
        strict = strict and variant is self._variant
        too_heavy = outcomes.too_heavy(self.name, variant, cost, strict=strict)
        return self._without_redis(too_heavy, identity)

    def _without_redis(self, decision: Decision, identity: str) -> Decision:
        """Return a Decision made without Redis, marked shadow for a policy in shadow mode.

        (Or for an identity outside its ``enforce_percent``: ``rollout.py``.)

        Marked now, so that ``together.decide`` lets only enforced denials keep
        a request's other policies from counting it (an operator's block is
        never marked: it is enforced in every mode, and vetoes).
        """
        if self.shadow or (self.partial and outside(self, identity)):
            return shadowed(self.name, identity, decision)
        return decision

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

    async def aask(self, pending: Pending) -> Decision:
        """:meth:`ask`, awaited on the event loop (``backends/aio_node.py``)."""
        run = self._arun  # (arun's own test of the backend, made once per policy)
        if run is None:  # (no async path: its sync one, off the loop)
            return await sync_to_async(self.ask, thread_sensitive=False)(pending)
        measured = metrics()
        try:
            if measured is None:
                outcome = await run(
                    self.backend, pending.key, pending.variant.algorithm.ahit, pending.cost
                )
            else:
                began = time.perf_counter()
                outcome = await run(
                    self.backend, pending.key, pending.variant.algorithm.ahit, pending.cost
                )
                measured.pending.observe(time.perf_counter() - began)
        except RedisError:
            return self.unanswered(pending)
        # (abefore_answer's first test: an allowed hit without a catalogue, the usual
        # case, has nothing to await, and no call is made for it.)
        if not outcome[0] or self._catalogue is not None:
            waiting = self.abefore_answer(pending, outcome)
            if waiting is not None:
                await waiting
        return self.answered(pending, outcome)

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
            allowed, variant.limit, remaining, retry_after_ms / 1000, reset_after_ms / 1000,
            self.name, False, outcome.window if type(outcome) is Periodic else variant.window,
        )  # fmt: skip
        if type(outcome) is Held:
            # A concurrency hit that took slots (only a counted one does).
            lease = Lease(self.backend, pending.key, outcome.token, pending.cost, self.name)
            decision = replace(decision, lease=lease)
        if not allowed:  # remembered by the deny cache; a block that starts reported
            denied(self, pending, outcome, decision)
        if counted and self._catalogue is not None:
            self._catalogue.record_if_due(variant)
        return decision

    def unanswered(self, pending: Pending) -> Decision:
        """Return the Decision for ``pending`` when Redis could not answer (degraded)."""
        if self.fallback is not None:
            return self.fallback.hit(pending.identity, pending.cost)
        return outcomes.degraded(self.name, pending.variant, self.fail_open)

    # -- reporting -------------------------------------------------------

    def report(self, identity: str, decision: Decision, *, also: str | None = None) -> Decision:
        """Return ``decision`` marked for shadow mode, counted in the metrics and history.

        :param also: as for :meth:`hit` (a block of it is enforced in shadow mode too).
        """
        if self.shadow or (self.partial and outside(self, identity)):  # (rollout.py)
            decision = shadowed(self.name, identity, decision, also)
        count_decision(self.name, decision)
        RECORDER.count(self.name, "a" if decision.allowed else field_of(decision), identity)
        return decision

    # -- reading and forgetting state --------------------------------------

    def peek(self, identity: str, *, request: Any = None) -> Decision:
        """Return what a hit of cost 1 would be told now, counting nothing.

        Never raises for Redis trouble: if Redis cannot answer, the answer is
        what the policy's outage fallback would tell (its local count), or
        else follows ``fail_open``, with ``degraded=True``, as :meth:`hit`. A
        policy in shadow mode returns the same Decision with ``shadow=True``.

        :param request: as for :meth:`hit`.
        While limits are off (``rate_limits_disabled``): allowed, ``limit`` 0,
        without Redis.

        :raises TypeError: for a per-plan policy without ``request``.
        """
        return peek_identity(self, identity, request)

    async def apeek(self, identity: str, *, request: Any = None) -> Decision:
        """:meth:`peek`, awaited on the event loop: the same steps and commands."""
        return await apeek_identity(self, identity, request)

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
        return reset_identity(self, identity)

    async def areset(self, identity: str) -> int:
        """:meth:`reset` on the event loop: the same keys, local state, token and errors."""
        return await areset_identity(self, identity)
