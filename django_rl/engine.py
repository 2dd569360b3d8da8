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
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django_rl.decision import Decision
from django_rl.headers import record
from django_rl.inline import InlineSpec
from django_rl.policies import Policy, get_policy, inline_policy

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

    def applies(self, request: Any) -> bool:
        return self.methods is None or request.method in self.methods

    def policies(self) -> list[Policy]:
        """Return the named policies, then the inline one.

        :raises ConfigurationError: for one that is missing or invalid.
        """
        found = [get_policy(name) for name in self.names]
        if self.inline is not None:
            found.append(inline_policy(self.inline))
        return found

    def hit(self, request: Any) -> list[Decision]:
        """Hit every policy for ``request`` (it must apply); return their Decisions.

        Every policy counts the request, even once one has denied it, the way
        DRF runs all of a view's throttles.
        """
        return hit_all(request, self.policies(), self.cost)


def hit_all(request: Any, policies: Iterable[Policy], cost: int = 1) -> list[Decision]:
    """Hit each of ``policies`` that applies to ``request``; return their Decisions."""
    decisions = []
    for policy in policies:
        decision = policy.hit_request(request, cost)
        if decision is not None:
            decisions.append(decision)
    return decisions


def settle(request: Any, decisions: Sequence[Decision]) -> list[Decision]:
    """Record ``decisions`` on ``request`` and set ``request.limited``; return all its Decisions."""
    every = record(request, decisions)
    http_request = getattr(request, "_request", request)
    if not getattr(http_request, LIMITED, False):
        # A shadow policy's denial limits nothing (Decision.denies).
        setattr(http_request, LIMITED, any(d.denies for d in decisions))
    return every


def unlimited(request: Any) -> None:
    """Set ``request.limited`` (``False``) and its Decisions (none) if no front door has."""
    http_request = getattr(request, "_request", request)
    if not hasattr(http_request, LIMITED):
        setattr(http_request, LIMITED, False)
        record(http_request, ())


@dataclass(frozen=True)
class Verdict:
    """What the limits of one front door decided for a request.

    :ivar decisions: this front door's Decisions.
    :ivar blocking: those that deny on behalf of a limit that blocks.
    """

    decisions: list[Decision]
    blocking: list[Decision]


def decide(request: Any, limits: Iterable[Limit]) -> Verdict:
    """Hit the policies of every limit that applies to ``request``; record and settle them."""
    decisions: list[Decision] = []
    blocking: list[Decision] = []
    for limit in limits:
        if not limit.applies(request):
            continue
        made = limit.hit(request)
        decisions += made
        if limit.block:
            blocking += [d for d in made if d.denies]
    settle(request, decisions)
    return Verdict(decisions, blocking)
