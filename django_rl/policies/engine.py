"""Deciding a request: the one path every front door takes.

A front door compiles what limits a view once (a :class:`Limit`: when the
decorator is applied, when a throttle class first meets a view's policy
names) and hands it each request: :meth:`Limit.decide` hits every policy
that applies, records the Decisions on the request (``core/recording.py``)
and says which deny on behalf of a limit that blocks; the front door only
turns that into its own answer (a 429 response, DRF's ``Throttled``, or the
view run anyway when ``block=False``).

* **One policy** (the usual view): :meth:`Limit.decide`'s own branch, i.e.
  :meth:`Policy.hit_request` (the policy's one decision: ``policy.py``),
  then :func:`_verdict_of_one` (:func:`~django_rl.core.recording.record`).
* **Several** (one ``@ratelimit`` of several policies, a throttle of several,
  several ``@ratelimit`` uses on a DRF view, ``hit_many``): each policy's hit
  prepared the same way (:meth:`Policy.prepare_request`), decided together,
  all or nothing (``together.py``), then reported and recorded.

**An exempt request** (``DJANGO_RL["EXEMPT"]``, ``exempt.py``) is decided by
no policy: no Decision, no round trip, no headers. Checked here, once per
request, for every front door (the drop-ins ask ``exempt.EXEMPTIONS`` too).

**A shadow policy never changes a response**: when identifying the request
or deciding it raises for a policy in shadow mode (its key or rate
callable, ...), that policy is left out of that request (no Decision) and
the error logged (``shadow.py``); the request's enforced policies are
decided as usual.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from django_rl.algorithms.base import new_tuple
from django_rl.core.async_identities import aidentify
from django_rl.core.decision import Decision
from django_rl.core.recording import record, recorded
from django_rl.leases import Lease, held
from django_rl.policies import ruled, settling, together, together_async
from django_rl.policies.charging import NOTHING, Charging
from django_rl.policies.exempt import EXEMPTIONS
from django_rl.policies.inline import InlineSpec
from django_rl.policies.policy import Pending, Policy
from django_rl.policies.registry import get_policy, inline_policy
from django_rl.policies.reporting import areport_requests, report_requests
from django_rl.policies.shadow import SHADOW_ERRORS
from django_rl.policies.together import _Call


class Verdict(NamedTuple):
    """What the limits of one front door decided for a request.

    Made by ``new_tuple`` (NamedTuple's own ``__new__`` is a Python function,
    and one is made per request).

    :ivar decisions: this front door's Decisions.
    :ivar blocking: those that deny on behalf of a limit that blocks.
    :ivar every: every Decision recorded on the request so far (these last).
    :ivar held: the concurrency slots these Decisions took (``leases.held``).
    """

    decisions: Sequence[Decision]
    blocking: Sequence[Decision]
    every: Sequence[Decision]
    held: Sequence[Lease]


#: A Verdict's ``held`` when its Decisions took no slots (shared: never changed).
NO_LEASES: tuple[Lease, ...] = ()


@dataclass(frozen=True)
class Limit:
    """One use of ``@ratelimit`` (or a throttle's policy names), compiled once.

    :ivar names: the named policies.
    :ivar cost: a request's weight under each of them, or a callable of the request.
    :ivar methods: the methods counted (HEAD wherever GET is: Django answers
        HEAD with the GET view), or ``None`` for every method.
    :ivar inline: the inline policy's spec (``rate=``), or ``None``.
    :ivar block: a denied request is refused (429); ``False``: the view runs
        with ``request.limited`` set.
    :ivar charging: the decorator's ``count_when``, ``costs`` and ``charge``
        (``charging.py``), over each policy's own; a limit or policy that sets
        any is decided by :func:`_decide_charged`.
    """

    names: tuple[str, ...]
    cost: int | Callable[[Any], Any] = 1
    methods: frozenset[str] | None = None
    inline: InlineSpec | None = None
    block: bool = True
    charging: Charging = NOTHING
    #: The one policy, when that is all the limit has (the usual view): its name or
    #: spec, and how it is found (``get_policy`` for a name, ``inline_policy``).
    _one: str | InlineSpec | None = field(init=False, compare=False, repr=False)
    _find: Callable[[Any], Policy] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        one: str | InlineSpec | None = None
        if self.charging is not NOTHING or type(self.cost) is not int:
            pass  # costs, count_when, charge or a callable cost: _decide_charged
        elif len(self.names) == 1 and self.inline is None:
            one = self.names[0]
        elif not self.names:
            one = self.inline
        object.__setattr__(self, "_one", one)  # (frozen: set once, here)
        object.__setattr__(self, "_find", get_policy if type(one) is str else inline_policy)

    def applies(self, request: Any) -> bool:
        """Return whether ``request``'s method is one the limit counts."""
        return self.methods is None or request.method in self.methods

    def policies(self) -> list[Policy]:
        """Return the named policies, then the inline one.

        :raises ConfigurationError: for one that is missing or invalid.
        """
        found = [get_policy(name) for name in self.names]
        if self.inline is not None:
            found.append(inline_policy(self.inline))
        return found

    def decide(self, request: Any) -> Verdict:
        """Decide ``request`` by the limit's policies, record the Decisions; say which block.

        :raises ConfigurationError: for a policy that is missing or invalid.
        """
        if self.methods is not None and request.method not in self.methods:
            return new_tuple(Verdict, ((), (), not_limited(request), NO_LEASES))
        if EXEMPTIONS.on:  # EXEMPT (exempt.py), or decided by RULES' middleware already
            known = _known(request, self)
            if known is not None:
                return known
            if (counted := ruled.decided(request)) is not None:
                made, rest = ruled.split(counted, self.policies())
                return self._joined(request, made, _hit_charged(request, self, rest))
        one = self._one
        if one is None:
            return _decide_charged(request, self, _hit_charged(request, self, self.policies()))
        # One policy, the usual view: its hit, then recorded (here: a frame fewer).
        policy = self._find(one)  # (the registry's, each time: settings may change)
        if policy.charging is not None:
            return _decide_charged(request, self, _hit_charged(request, self, [policy]))
        try:
            decision = policy.hit_request(request, self.cost)  # type: ignore[arg-type]  # an int
        except Exception as exc:
            decision = _left_out(policy, exc)
        return _verdict_of_one(request, decision, self.block)

    async def adecide(self, request: Any) -> Verdict:
        """:meth:`decide` on the event loop (async views): the same steps and Verdict.

        The request's identities and per-plan rates are asked first
        (:func:`aidentify`, ``PlanRates.arate_for``: built-in keys on the
        loop, the project's sync callables in their thread), then decided by
        the same steps, the round trip awaited.
        """
        if self.methods is not None and request.method not in self.methods:
            return new_tuple(Verdict, ((), (), not_limited(request), NO_LEASES))
        if EXEMPTIONS.on:  # EXEMPT (exempt.py), or decided by RULES' middleware already
            known = _known(request, self)
            if known is not None:
                return known
            if (counted := ruled.decided(request)) is not None:
                made, rest = ruled.split(counted, self.policies())
                return self._joined(request, made, await _ahit_charged(request, self, rest))
        one = self._one
        policy = None
        if one is not None:
            policy = self._find(one)
        if policy is None or policy.charging is not None:
            policies = self.policies() if policy is None else [policy]
            return _decide_charged(request, self, await _ahit_charged(request, self, policies))
        try:
            decision = await _ahit_request(request, policy, self.cost)  # type: ignore[arg-type]
        except Exception as exc:
            decision = _left_out(policy, exc)
        return _verdict_of_one(request, decision, self.block)

    def _joined(self, request: Any, made: list[Decision], new: list[Decision]) -> Verdict:
        """The Verdict of Decisions RULES' middleware ``made`` (recorded then) and ``new`` ones."""
        decisions = made + new
        blocking = [d for d in decisions if d.denies] if self.block else []
        # The middleware holds its Decisions' slots; only the new ones' are this door's.
        return new_tuple(Verdict, (decisions, blocking, record(request, new), held(new)))


def _hit_charged(request: Any, limit: Limit, policies: Sequence[Policy]) -> list[Decision]:
    """Hit ``policies`` together, each at its cost (``settling.weigh``); their Decisions.

    When one gives back or charges after the response (``count_when``,
    ``charge``), the hits are decided by the script (``together.decide``'s
    ``kept``: what a give-back takes back is then exact), and the calls that
    counted are kept on the request for the front door (``settling.expect``).
    """
    weighted, after = settling.weigh(request, limit, policies)
    kept: list[_Call] | None = None if after is None else []
    made = _hit_weighted(request, weighted, kept)
    if kept and after:  # (nothing counted, nothing kept: a request refused)
        settling.expect(request, after, kept)
    return [decision for _, decision in made]


async def _ahit_charged(request: Any, limit: Limit, policies: Sequence[Policy]) -> list[Decision]:
    """:func:`_hit_charged` on the event loop."""
    weighted, after = settling.weigh(request, limit, policies)
    kept: list[_Call] | None = None if after is None else []
    made = await _ahit_weighted(request, weighted, kept)
    if kept and after:
        settling.expect(request, after, kept)
    return [decision for _, decision in made]


def _decide_charged(request: Any, limit: Limit, decisions: list[Decision]) -> Verdict:
    """Record ``decisions`` (:func:`_hit_charged`'s); return their Verdict."""
    blocking = [d for d in decisions if d.denies] if limit.block else []
    return new_tuple(Verdict, (decisions, blocking, record(request, decisions), held(decisions)))


def _verdict_of_one(request: Any, decision: Decision | None, block: bool) -> Verdict:
    """Record one policy's Decision (``None``: none) on ``request``; return its Verdict.

    No Decision when the policy does not apply to the request, or is a
    shadow policy whose decision raised (logged). ``block``: a denial blocks.
    """
    if decision is None:
        return new_tuple(Verdict, ((), (), record(request, ()), NO_LEASES))
    decisions = (decision,)
    every = record(request, decisions)
    lease = decision.lease
    taken = NO_LEASES if lease is None or lease.released else (lease,)
    if block and not decision.allowed and not decision.shadow:  # (Decision.denies)
        return new_tuple(Verdict, (decisions, decisions, every, taken))
    return new_tuple(Verdict, (decisions, (), every, taken))


async def _ahit_request(request: Any, policy: Policy, cost: int) -> Decision | None:
    if policy.limits_nothing:
        return None
    identity = await aidentify(policy.identify, request)
    if identity is None:
        return None
    await _arates(request, policy)
    return await policy.ahit_request(request, cost, identity=identity)


async def _arates(request: Any, policy: Policy) -> None:
    """Ask a per-plan policy's rate function for ``request`` on the loop (``arate_for``)."""
    rates = policy.rates
    if rates is not None:
        await rates.arate_for(request)


def _left_out(policy: Policy, exc: Exception) -> Decision | None:
    """Leave a shadow policy whose decision raised out of the request (logged); else raise.

    :return: ``None``: no Decision for this policy.
    """
    if not policy.shadow:
        raise exc
    SHADOW_ERRORS.failed(policy.name, exc)
    return None


def hit_all(request: Any, policies: Iterable[Policy], cost: int = 1) -> list[Decision]:
    """Hit each of ``policies`` that applies to ``request`` together; return their Decisions.

    Not recorded on the request (:meth:`Limit.decide` and :func:`decide` do).
    All or nothing (``together.py``): when a policy denies the request, no
    policy counts it; when none does, each counts it. One round trip where
    the policies' keys share a slot.
    """
    return [decision for _, decision in _hit_weighted(request, [(p, cost) for p in policies])]


async def _ahit_weighted(
    request: Any, weighted: Sequence[tuple[Policy, int]], kept: list[_Call] | None = None
) -> list[tuple[int, Decision]]:
    """:func:`_hit_weighted` on the event loop (see :meth:`Limit.adecide`)."""
    if len(weighted) == 1 and kept is None:
        policy, cost = weighted[0]
        try:
            decision = await _ahit_request(request, policy, cost)
        except Exception as exc:
            decision = _left_out(policy, exc)
        return [] if decision is None else [(0, decision)]
    known: dict[Any, str | None] = {}
    failed: set[int] = set()
    for index, (policy, _) in enumerate(weighted):
        if policy.limits_nothing:
            continue
        try:
            identify = policy.identify
            if identify not in known:
                # (Noted once it returns, as on the sync path.)
                known[identify] = await aidentify(identify, request)
            if known[identify] is not None:
                await _arates(request, policy)
        except Exception as exc:
            _left_out(policy, exc)  # (raises for an enforced policy)
            failed.add(index)
    for policy, _ in weighted:
        waiting = policy.aready()
        if waiting is not None:
            await waiting
    hits, indexes, reported = _prepared_hits(request, weighted, known, failed)
    if not hits:
        return []
    decided = await together_async.adecide(hits, kept)
    done = await areport_requests(
        request, [(p, i, d) for (p, i), d in zip(reported, decided, strict=True)]
    )
    return list(zip(indexes, done, strict=True))


def _hit_weighted(
    request: Any, weighted: Sequence[tuple[Policy, int]], kept: list[_Call] | None = None
) -> list[tuple[int, Decision]]:
    """Hit ``(policy, cost)`` pairs for ``request`` together; (index, Decision) of those applied.

    ``kept``: as ``together.decide``'s (a hit alone is decided by the script too).
    """
    if len(weighted) == 1 and kept is None:
        policy, cost = weighted[0]
        try:
            decision = policy.hit_request(request, cost)
        except Exception as exc:
            decision = _left_out(policy, exc)
        return [] if decision is None else [(0, decision)]
    hits, indexes, reported = _prepared_hits(request, weighted, {}, ())
    if not hits:
        return []
    decided = together.decide(hits, kept)
    done = report_requests(
        request, [(p, i, d) for (p, i), d in zip(reported, decided, strict=True)]
    )
    return list(zip(indexes, done, strict=True))


def _prepared_hits(
    request: Any,
    weighted: Sequence[tuple[Policy, int]],
    known: dict[Any, str | None],
    failed: Container[int],
) -> tuple[list[tuple[Policy, Pending | Decision]], list[int], list[tuple[Policy, str]]]:
    """Each policy's hit prepared (``Policy.prepare_request``), with its index and identity.

    ``known``: identities already found, by identity function; ``failed``: the
    indexes of shadow policies already left out (the async path's, which asks first).
    """
    indexes: list[int] = []
    reported: list[tuple[Policy, str]] = []
    hits: list[tuple[Policy, Pending | Decision]] = []
    # Policies of the same key share its function (identities.py): the
    # request is identified once per function, not once per policy.
    for index, (policy, cost) in enumerate(weighted):
        if policy.limits_nothing or index in failed:
            continue  # rate None: applies to no request, never identifies one
        try:
            identify = policy.identify
            if identify not in known:
                # (Not noted before it returns: a shadow policy's error is
                # not an answer for an enforced policy of the same key.)
                known[identify] = identify(request)
            identity = known[identify]
            if identity is None:
                continue
            made = policy.prepare_request(request, cost, identity=identity)
        except Exception as exc:
            _left_out(policy, exc)
            continue
        if made is not None:
            indexes.append(index)
            reported.append((policy, identity))
            hits.append((policy, made[1]))
    return hits, indexes, reported


def not_limited(request: Any) -> list[Decision]:
    """Record no Decision on ``request`` (it is not limited); return all it has.

    Sets ``request.limited`` (``False``) and its Decisions (none) if no
    front door has, so a view can always read them.
    """
    return record(request, ())


def decide(request: Any, limits: Sequence[Limit]) -> Verdict:
    """Decide the policies of every limit that applies to ``request``, together; record them.

    All the limits' policies are decided at once, all or nothing (each at its
    limit's cost), as one limit's are: several ``@ratelimit`` uses noted on
    one DRF view count a request only if none denies it.
    """
    if len(limits) == 1:
        return limits[0].decide(request)
    if EXEMPTIONS.on:  # EXEMPT (exempt.py), or decided by RULES' middleware already
        if EXEMPTIONS.exempts(request):
            return new_tuple(Verdict, ((), (), not_limited(request), NO_LEASES))
        known = [_known(request, limit) for limit in limits]
        if all(v is not None for v in known):
            return _joined([v for v in known if v is not None], recorded(request))
        limits = [limit for limit, v in zip(limits, known, strict=True) if v is None]
    owned = [
        (limit, policy) for limit in limits if limit.applies(request) for policy in limit.policies()
    ]
    if EXEMPTIONS.on and (counted := ruled.decided(request)) is not None:
        # Policies RULES counted already: their Decisions, not a second count.
        made = [(limit, counted[p.name]) for limit, p in owned if p.name in counted]
        owned = [(limit, p) for limit, p in owned if p.name not in counted]
    else:
        made = []
    weighted: list[tuple[Policy, int]] = []
    after: dict[str, Charging] = {}
    for limit, policy in owned:
        costs, rules = settling.weigh(request, limit, [policy])
        weighted += costs
        after.update(rules or {})
    kept: list[_Call] | None = [] if after else None
    hits = _hit_weighted(request, weighted, kept)
    if kept:
        settling.expect(request, after, kept)
    new = [decision for _, decision in hits]
    blocking = [d for limit, d in made if limit.block and d.denies]
    blocking += [d for index, d in hits if owned[index][0].block and d.denies]
    every = record(request, new)
    return new_tuple(Verdict, ([d for _, d in made] + new, blocking, every, held(new)))


#: The Django request's attribute that holds the Verdicts ``RateLimitMiddleware``
#: made for the view's own limits (``decide_together``), until each is asked for.
PREDECIDED = "_django_rl_predecided"


def _known(request: Any, limit: Limit) -> Verdict | None:
    """Return ``limit``'s Verdict if already known: the request is exempt, or RULES decided it."""
    if EXEMPTIONS.exempts(request):
        return new_tuple(Verdict, ((), (), not_limited(request), NO_LEASES))
    http_request = getattr(request, "_request", request)
    decided = getattr(http_request, PREDECIDED, None)
    if not decided:
        return None
    found: Verdict | None = decided.pop(limit, None)
    return found


def _joined(verdicts: Sequence[Verdict], every: list[Decision]) -> Verdict:
    decisions = [d for v in verdicts for d in v.decisions]
    blocking = [d for v in verdicts for d in v.blocking]
    return new_tuple(Verdict, (decisions, blocking, every, held(decisions)))


def decide_together(request: Any, first: Sequence[Limit], then: Sequence[Limit]) -> Verdict:
    """Decide the limits ``first`` (RULES') and ``then`` (the view's own) at once; record them.

    All or nothing, one round trip where the keys share a slot, as one
    limit's several policies: a policy named by several of them is hit once
    (at the cost of the first that names it). Returns the Verdict of
    ``first``; each of ``then`` gets its own, kept on the request for its
    front door (:meth:`Limit.decide` answers it without deciding again).
    """
    limits = [*first, *then]
    applying = [limit for limit in limits if limit.applies(request)]
    weighted: list[tuple[Policy, int]] = []
    where: dict[str, int] = {}
    owners: list[list[Limit]] = []
    after: dict[str, Charging] = {}
    for limit in applying:
        for policy in limit.policies():
            index = where.get(policy.name)
            if index is None:
                where[policy.name] = index = len(weighted)
                costs, rules = settling.weigh(request, limit, [policy])
                weighted += costs
                after.update(rules or {})
                owners.append([])
            if limit not in owners[index]:
                owners[index].append(limit)
    kept: list[_Call] | None = [] if after else None
    made = _hit_weighted(request, weighted, kept)
    if kept:
        settling.expect(request, after, kept)
    ruled.note(request, {weighted[index][0].name: decision for index, decision in made})
    every = record(request, [decision for _, decision in made])
    mine: dict[Limit, tuple[list[Decision], list[Decision]]] = {limit: ([], []) for limit in limits}
    for index, decision in made:
        for limit in owners[index]:
            decisions, blocking = mine[limit]
            decisions.append(decision)
            if limit.block and decision.denies:
                blocking.append(decision)
    verdicts = {limit: new_tuple(Verdict, (d, b, every, held(d))) for limit, (d, b) in mine.items()}
    if then:
        http_request = getattr(request, "_request", request)
        setattr(http_request, PREDECIDED, {limit: verdicts[limit] for limit in then})
    firsts = [verdicts[limit] for limit in dict.fromkeys(first)]
    return _joined(firsts, every)
