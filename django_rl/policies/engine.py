"""Deciding a request: what both front doors (and the decorator on DRF views) share.

A front door hands the request and what limits it here; the engine hits
every policy that applies, records the Decisions on the request and sets
``request.limited``; the front door only turns the outcome into its own
answer (a 429 response, DRF's ``Throttled``, or the view run anyway when
``block=False``).

On the request (the Django ``HttpRequest``; a DRF ``Request`` reads through
to it):

* ``django_rl_decisions``: every Decision made for it, oldest first
  (``headers.record``);
* ``limited``: ``True`` once any policy has denied it, else ``False`` (a
  policy in shadow mode never sets it).

Both are set as soon as a front door looks at the request, even when no
policy applies (no Decision), so a view can always read them.

**A shadow policy never changes a response**: when identifying the request
or deciding it raises for a policy in shadow mode (its key or rate
callable, ...), that policy is left out of that request (no Decision) and
the error logged (``shadow.py``); the request's enforced policies are
decided as usual. (The ``try`` costs nothing on the usual path.)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from django_rl.core import installed
from django_rl.core.decision import Decision
from django_rl.http.headers import REQUEST_ATTRIBUTE, record
from django_rl.policies import together
from django_rl.policies.inline import InlineSpec
from django_rl.policies.policy import Pending, report_requests
from django_rl.policies.registry import Policy, get_policy, inline_policy
from django_rl.policies.shadow import SHADOW_ERRORS

#: The attribute that says whether any policy denied the request.
LIMITED = "limited"


@dataclass(frozen=True)
class Limit:
    """One use of ``@ratelimit``: its policies, a request's weight, what counts, and the answer.

    :ivar names: the named policies.
    :ivar inline: the inline policy's spec (``rate=``), or ``None``.
    :ivar methods: the methods counted (HEAD wherever GET is: Django answers
        HEAD with the GET view), or ``None`` for every method.
    :ivar block: a denied request is refused (429); ``False``: the view runs
        with ``request.limited`` set.
    """

    names: tuple[str, ...]
    cost: int = 1
    methods: frozenset[str] | None = None
    inline: InlineSpec | None = None
    block: bool = True
    #: The name of the one named policy, when that is all the limit has (the usual view).
    single: str | None = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        single = self.names[0] if len(self.names) == 1 and self.inline is None else None
        object.__setattr__(self, "single", single)  # (frozen: set once, here)

    def applies(self, request: Any) -> bool:
        return self.methods is None or request.method in self.methods

    def only(self) -> Policy | None:
        """Return the limit's policy when it has one (the usual view), else ``None``.

        :raises ConfigurationError: for one that is missing or invalid.
        """
        if self.single is not None:
            return get_policy(self.single)
        return inline_policy(self.inline) if self.inline is not None and not self.names else None

    def policies(self) -> list[Policy]:
        """Return the named policies, then the inline one.

        :raises ConfigurationError: for one that is missing or invalid.
        """
        found = [get_policy(name) for name in self.names]
        if self.inline is not None:
            found.append(inline_policy(self.inline))
        return found

    def hit(self, request: Any) -> list[Decision]:
        """Hit every policy for ``request`` (it applies), all or nothing; return the Decisions."""
        return hit_all(request, self.policies(), self.cost)


def hit_all(request: Any, policies: Iterable[Policy], cost: int = 1) -> list[Decision]:
    """Hit each of ``policies`` that applies to ``request`` together; return their Decisions.

    All or nothing (``together.py``): when a policy denies the request, no
    policy counts it; when none does, each counts it. One round trip where
    the policies' keys share a slot.
    """
    return [decision for _, decision in _hit_weighted(request, [(p, cost) for p in policies])]


def _hit_weighted(
    request: Any, weighted: Sequence[tuple[Policy, int]]
) -> list[tuple[int, Decision]]:
    """Hit ``(policy, cost)`` pairs for ``request`` together; (index, Decision) of those applied."""
    if len(weighted) == 1:
        # One policy, the usual case: what together.decide does for one hit
        # (ask Redis unless the hit was decided without it), without its lists.
        policy, cost = weighted[0]
        try:
            prepared = policy.prepare_request(request, cost)
            if prepared is None:
                return []
            identity, one = prepared
            decision = policy.ask(one) if type(one) is Pending else one
            return [(0, policy.report_request(request, identity, decision))]  # type: ignore[arg-type]
        except Exception as exc:
            if not policy.shadow:
                raise
            SHADOW_ERRORS.failed(policy.name, exc)  # left out of this request
            return []
    indexes: list[int] = []
    policies: list[Policy] = []
    identities: list[str] = []
    hits: list[Pending | Decision] = []
    # Policies of the same key share its function (identities.py): the
    # request is identified once per function, not once per policy.
    known: dict[Any, str | None] = {}
    for index, (policy, cost) in enumerate(weighted):
        if policy.unlimited:
            continue  # rate None: applies to no request, never identifies one
        identify = policy.identify
        try:
            if identify in known:
                found = known[identify]
            else:
                # (Not noted before it returns: a shadow policy's error is
                # not an answer for an enforced policy of the same key.)
                found = known[identify] = identify(request)
            if found is None:
                continue
            # prepare_request, its identity known: the same for each policy.
            made = policy._hit_request(request, found, cost, defer=True)
        except Exception as exc:
            if not policy.shadow:
                raise
            SHADOW_ERRORS.failed(policy.name, exc)  # left out of this request
            continue
        if made is not None:
            indexes.append(index)
            policies.append(policy)
            identities.append(found)
            hits.append(made)
    if not hits:
        return []
    decided = together.decide(list(zip(policies, hits, strict=True)))
    reported = report_requests(request, list(zip(policies, identities, decided, strict=True)))
    return list(zip(indexes, reported, strict=True))


def hit_many(hits: Iterable[tuple[Policy | str, str, int]]) -> list[Decision]:
    """Count several hits together, all or nothing; return a Decision for each, in order.

    Each hit is ``(policy or its name, identity, cost)``. When any policy
    denies its hit, no hit is counted, and every Decision reports its
    policy's state without its hit (``allowed``: whether that policy alone
    would have allowed it); when none denies, every hit is counted. One
    round trip where the keys share a slot (one server, Sentinel, or one
    identity's keys on a cluster); across slots, see ``together.py``. Two
    hits of one policy and identity count as one of their summed cost.

    For code outside views; a per-plan policy (a rate function) cannot be
    hit here (``TypeError``: it needs a request). Never raises for Redis
    trouble: degraded Decisions, as :meth:`Policy.hit`.

    :raises ConfigurationError: for a name that is not a valid policy.
    :raises ValueError: for a cost that is not a whole number from 1 to its limit.
    """
    made: list[tuple[Policy, str, Pending | Decision]] = []
    for policy_or_name, identity, cost in hits:
        policy = get_policy(policy_or_name) if isinstance(policy_or_name, str) else policy_or_name
        made.append((policy, identity, policy.prepare(identity, cost)))
    decided = together.decide([(policy, m) for policy, _, m in made])
    return [
        policy.report(identity, decision)
        for (policy, identity, _), decision in zip(made, decided, strict=True)
    ]


def decide_one(
    request: Any, policy: Policy, cost: int = 1
) -> tuple[Decision | None, list[Decision]]:
    """Hit ``policy`` alone for ``request``, record and settle; return its and all the Decisions.

    A shadow policy whose decision raises is left out (``None``), logged.

    All: every Decision recorded on the request so far, its own last.

    What :func:`hit_all` then :func:`settle` do for one policy (the usual
    view: one ``@ratelimit`` use of one policy, a throttle of one scope),
    without their lists. The Decision is ``None`` when the policy does not
    apply to the request.
    """
    if not installed.looked:  # once per process: is "django_rl" in INSTALLED_APPS?
        installed.look()
    try:
        decision = policy.hit_request(request, cost)
    except Exception as exc:
        if not policy.shadow:
            raise
        SHADOW_ERRORS.failed(policy.name, exc)  # left out of this request
        decision = None
    http_request = getattr(request, "_request", request)
    # headers.record, inline, as in settle.
    every: list[Decision] | None = getattr(http_request, REQUEST_ATTRIBUTE, None)
    if every is None:
        every = []
        setattr(http_request, REQUEST_ATTRIBUTE, every)
    if decision is not None:
        every.append(decision)
    if not getattr(http_request, LIMITED, False):
        # A shadow policy's denial limits nothing (Decision.denies, inline).
        setattr(
            http_request,
            LIMITED,
            decision is not None and not decision.allowed and not decision.shadow,
        )
    return decision, every


def settle(request: Any, decisions: Sequence[Decision]) -> list[Decision]:
    """Record ``decisions`` on ``request`` and set ``request.limited``; return all its Decisions."""
    if not installed.looked:
        installed.look()
    http_request = getattr(request, "_request", request)
    # headers.record, inline: this runs on every request a front door decides.
    every: list[Decision] | None = getattr(http_request, REQUEST_ATTRIBUTE, None)
    if every is None:
        every = []
        setattr(http_request, REQUEST_ATTRIBUTE, every)
    every.extend(decisions)
    if not getattr(http_request, LIMITED, False):
        # A shadow policy's denial limits nothing (Decision.denies, inline).
        limited = False
        for decision in decisions:
            if not decision.allowed and not decision.shadow:
                limited = True
                break
        setattr(http_request, LIMITED, limited)
    return every


def unlimited(request: Any) -> None:
    """Set ``request.limited`` (``False``) and its Decisions (none) if no front door has."""
    if not installed.looked:
        installed.look()
    http_request = getattr(request, "_request", request)
    if not hasattr(http_request, LIMITED):
        setattr(http_request, LIMITED, False)
        record(http_request, ())


class Verdict(NamedTuple):
    """What the limits of one front door decided for a request.

    :ivar decisions: this front door's Decisions.
    :ivar blocking: those that deny on behalf of a limit that blocks.
    """

    decisions: list[Decision]
    blocking: list[Decision]


def decide(request: Any, limits: Sequence[Limit]) -> Verdict:
    """Hit the policies of every limit that applies to ``request``, together; record and settle.

    All the limits' policies are decided at once, all or nothing (each at its
    limit's cost), as one limit's are: several ``@ratelimit`` uses noted on
    one DRF view count a request only if none denies it.
    """
    if len(limits) == 1:  # one @ratelimit use: no owners to tell apart
        limit = limits[0]
        policy = limit.only() if limit.applies(request) else None
        if policy is not None:
            decision, _ = decide_one(request, policy, limit.cost)
            if decision is None:
                return Verdict([], [])
            return Verdict([decision], [decision] if limit.block and decision.denies else [])
        if limit.applies(request):
            cost = limit.cost
            made = _hit_weighted(request, [(policy, cost) for policy in limit.policies()])
        else:
            made = []
        decisions = [decision for _, decision in made]
        blocking = [d for d in decisions if d.denies] if limit.block else []
    else:
        owned = [
            (limit, policy)
            for limit in limits
            if limit.applies(request)
            for policy in limit.policies()
        ]
        made = _hit_weighted(request, [(policy, limit.cost) for limit, policy in owned])
        decisions = [decision for _, decision in made]
        blocking = [d for index, d in made if owned[index][0].block and d.denies]
    settle(request, decisions)
    return Verdict(decisions, blocking)
