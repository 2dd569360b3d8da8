"""After the response: giving back the hits ``count_when`` does not count, and ``charge``.

A policy (or a decorator) with ``count_when`` or ``charge`` (``charging.py``)
is decided like any other, before the view, so concurrent requests never
pass the limit together; its hits are decided by ``together.lua`` (the
engine passes ``kept`` to ``together.decide``), whose call says exactly what
was counted. :func:`expect` keeps those calls on the request; the front door
hands the response (or the view's exception) to :func:`settle` (or
:func:`asettle` on the event loop), which, for each policy:

* **gives back** the hit when ``count_when`` says it does not count:
  ``refund.lua`` (``together.refund``), one atomic round trip per call (one
  per request on one server), the hit taken back as if it had never been
  counted, and never below an empty state (each algorithm's ``<name>_refund``);
  this process's deny cache forgets the identity's remembered denial;
* **charges** the points ``charge`` returns (``points.py``), one round trip.

Both only for the algorithms of ``charging.OUTCOME_ALGORITHMS`` (a
``concurrency`` policy's slots are given back at the response's close
anyway). Redis unable to answer: nothing given back or charged (the node
logs the outage once). Settled once: a second call finds nothing owed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from asgiref.sync import sync_to_async
from redis.exceptions import RedisError

from django_rl.backends.aio_node import arun, async_capable
from django_rl.policies import charges as charged_points
from django_rl.policies import together, together_async
from django_rl.policies.charging import (
    NOTHING,
    OUTCOME_ALGORITHMS,
    Charging,
    CountWhen,
    cost_of,
    keeps,
)
from django_rl.policies.charging import points as points_of
from django_rl.policies.policy import Pending, Policy
from django_rl.policies.together import _Call

logger = logging.getLogger("django_rl")

#: The Django request's attribute that holds what is owed after its response.
ATTRIBUTE = "_django_rl_owed"


class Owed:
    """What deciding a request left to settle after the response: calls and each policy's rules."""

    __slots__ = ("calls", "rules")

    def __init__(self, calls: list[_Call], rules: dict[str, Charging]) -> None:
        self.calls = calls
        self.rules = rules


def weigh(
    request: Any, limit: Any, policies: Sequence[Policy]
) -> tuple[list[tuple[Policy, int]], dict[str, Charging] | None]:
    """Return each policy with its cost for ``request``, and the rules to apply after it.

    ``limit``: an ``engine.Limit`` (its ``cost``, and its ``charging`` over
    each policy's own). The rules (by policy name) are ``None`` when nothing
    is left for after the response.
    """
    charging: Charging = limit.charging
    cost = limit.cost
    weighted: list[tuple[Policy, int]] = []
    after: dict[str, Charging] | None = None
    for policy in policies:
        rules = charging if policy.charging is None else charging.over(policy.charging)
        if rules is NOTHING:
            weighted.append((policy, cost if type(cost) is int else cost_of(cost, None, request)))
            continue
        weighted.append((policy, cost_of(cost, rules.costs, request)))
        if rules.after_response:
            if after is None:
                after = {}
            after.setdefault(policy.name, rules)
    return weighted, after


class Settling:
    """Whether this process has kept anything to settle on a request yet.

    :ivar on: ``False`` until :func:`expect` first keeps calls on a request
        (no policy that gives back or charges has counted a hit here); the
        front doors test it before asking :func:`owes`, so the usual path,
        where no policy settles after its response, pays one attribute test.
    """

    __slots__ = ("on",)

    def __init__(self) -> None:
        self.on = False


SETTLING = Settling()


def expect(request: Any, rules: dict[str, Charging], calls: list[_Call]) -> None:
    """Keep ``calls`` (what counted ``request``'s hits) on it, to settle after its response."""
    SETTLING.on = True  # (before the request holds them: the thread that asks sees both)
    http_request = getattr(request, "_request", request)
    owed: list[Owed] | None = http_request.__dict__.get(ATTRIBUTE)
    if owed is None:
        owed = []
        setattr(http_request, ATTRIBUTE, owed)
    owed.append(Owed(calls, rules))


def owes(request: Any) -> bool:
    """Return whether something is left to settle after ``request``'s response."""
    http_request = getattr(request, "_request", request)
    return bool(getattr(http_request, "__dict__", {}).get(ATTRIBUTE))


def _take(request: Any) -> list[Owed]:
    http_request = getattr(request, "_request", request)
    return http_request.__dict__.pop(ATTRIBUTE, None) or []


#: What to do for one response: the calls reduced to the hits to give back,
#: and the hits to charge with their points.
Plan = tuple[list[_Call], list[tuple[Pending, int]]]


def plan(owed: list[Owed], request: Any, response: Any, raised: bool) -> Plan:
    """Ask each policy's ``count_when`` and ``charge`` (once per callable); return the Plan."""
    refunds: list[_Call] = []
    charges: list[tuple[Pending, int]] = []
    said: dict[int, Any] = {}  # (each rule asked once per response)
    for debt in owed:
        for call in debt.calls:
            back: list[int] = []
            for index, hit in enumerate(call.group):
                rules = debt.rules.get(hit.policy.name)
                if rules is None or hit.variant.algorithm.name not in OUTCOME_ALGORITHMS:
                    continue
                if not _said(said, rules.count_when, request, response, raised):
                    back.append(index)
                elif rules.charge is not None and not raised:
                    key = id(rules.charge)
                    if key not in said:
                        said[key] = points_of(rules.charge, request, response)
                    if said[key] > 0:
                        charges.append((hit, said[key]))
            if back:
                refunds.append(call.only(back))
    return refunds, charges


def _said(
    said: dict[int, Any], rule: CountWhen | None, request: Any, response: Any, raised: bool
) -> bool:
    key = id(rule)
    if key not in said:
        said[key] = keeps(rule, request, response, raised)
    return bool(said[key])


def settle(request: Any, response: Any, *, raised: bool = False) -> None:
    """Give back and charge what ``request``'s decisions owe, now that ``response`` is known.

    ``raised``: the view raised (a failure; ``response`` is ``None``).
    Never raises: Redis unable to answer leaves the hits counted (and any
    other error is logged: a response is never failed for its settling).
    """
    owed = _take(request)
    if not owed:
        return
    try:
        _settle(owed, request, response, raised)
    except Exception:
        logger.exception("could not settle count_when and charge after the response")


async def asettle(request: Any, response: Any, *, raised: bool = False) -> None:
    """:func:`settle` on the event loop: the same plan, the round trips awaited."""
    owed = _take(request)
    if not owed:
        return
    try:
        await _asettle(owed, request, response, raised)
    except Exception:
        logger.exception("could not settle count_when and charge after the response")


def _settle(owed: list[Owed], request: Any, response: Any, raised: bool) -> None:
    refunds, charges = plan(owed, request, response, raised)
    for call in refunds:
        first = call.group[0]
        try:
            first.policy.backend.run(first.key, together.refund, call)
        except RedisError as exc:
            _not_settled("give back", exc)
            continue
        _forget_denials(call)
    for hit, points in charges:
        charged_points.charge(hit, points)


async def _asettle(owed: list[Owed], request: Any, response: Any, raised: bool) -> None:
    refunds, charges = plan(owed, request, response, raised)
    for call in refunds:
        first = call.group[0]
        backend = first.policy.backend
        try:
            if async_capable(backend):
                await arun(backend, first.key, together_async.arefund, call)
            else:
                await sync_to_async(backend.run, thread_sensitive=False)(
                    first.key, together.refund, call
                )
        except RedisError as exc:
            _not_settled("give back", exc)
            continue
        _forget_denials(call)
    for hit, points in charges:
        await charged_points.acharge(hit, points)


def _forget_denials(call: _Call) -> None:
    """Forget this process's remembered denials of the keys given back (room was made)."""
    for hit in call.group:
        denials = hit.policy.denials
        if denials is not None:
            denials.forget(hit.key)


def _not_settled(what: str, exc: RedisError) -> None:
    # The node logged the outage or error reply once; the hits stay counted.
    logger.debug("could not %s after the response: %s", what, exc)
