"""Several policies' hits decided together, all or nothing.

When any policy that enforces denies, no policy counts the hit; when none
does, every policy counts it as it would alone. What the policies of one
request (or of one ``hit_many`` call) leave in Redis is then as if the
request had been decided by one limit: a client refused by ``burst`` does
not use up its ``daily`` quota.

* **One slot, one round trip.** Policies whose keys share a hash slot (one
  server, Sentinel's primary, or a cluster slot: the keys of one identity,
  which its hash tag keeps together) are decided by one script,
  ``algorithms/together.lua``: every policy looks, then, if none denies,
  every one counts. A script runs alone on the server, so no other request
  comes between the looks and the counts.
* **Several slots** (a cluster, policies of different identities): one
  script per slot, reserve and refund; see :func:`_decide_across`.
* A policy in shadow mode never denies the request: it is counted when the
  others allow, and its own denial counts nothing, as alone.
* A Decision of a hit that was not counted (another policy denied) reports
  its policy's state without the hit: ``remaining`` as it is, ``allowed``
  whether it alone would have allowed the hit.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from django_rl.algorithms import Outcome
from django_rl.algorithms.base import PRELUDE
from django_rl.algorithms.blocking import script_name
from django_rl.backends import LuaScript
from django_rl.backends.clock import ClockError
from django_rl.observability.metrics import metrics
from django_rl.policies.policy import Pending, Policy
from django_rl.policies.rollout import outside

if TYPE_CHECKING:
    from django_rl.backends import RedisNode
    from django_rl.core.decision import Decision

#: The algorithms a script of several policies can hold: each a ``<name>.lua``.
FRAGMENTS = (
    "fixed_window", "sliding_log", "token_bucket", "gcra", "sliding_window", "concurrency",
    "quota",
)  # fmt: skip

SCRIPT = LuaScript.from_parts(
    "django_rl.algorithms",
    (PRELUDE, *(f"{name}.lua" for name in FRAGMENTS), "blocks.lua", "together.lua"),
    "",
    name="together.lua",
)
#: Takes back what ``SCRIPT`` counted on one slot when another slot denied.
REFUND = LuaScript.from_parts(
    "django_rl.algorithms",
    (PRELUDE, *(f"{name}.lua" for name in FRAGMENTS), "blocks.lua", "refund.lua"),
    "",
    name="refund.lua",
)

#: Attempts before a decision gives up because ``fixed_window``'s estimate of
#: the server's window keeps missing (as ``fixed_window.MAX_ATTEMPTS``).
MAX_ATTEMPTS = 4


def split(made: Sequence[tuple[Policy, Pending | Decision]]) -> tuple[list[Pending], bool]:
    """Return the hits Redis must decide, and whether a Decision made without it vetoes.

    (``m.shadow``, not ``policy.shadow``: a shadow policy's block is
    enforced, and vetoes.) Shared by :func:`decide` and ``together_async``.
    """
    pending: list[Pending] = []
    vetoed = False
    for _, m in made:  # (one pass: this runs on every request of several policies)
        if type(m) is Pending:
            pending.append(m)
        elif not m.allowed and not m.shadow:  # type: ignore[union-attr]  # a Decision
            vetoed = True
    return pending, vetoed


def decide(
    made: Sequence[tuple[Policy, Pending | Decision]], kept: list[_Call] | None = None
) -> list[Decision]:
    """Decide ``made`` (each policy's hit, or its Decision made without Redis) together.

    A Decision given that denies on behalf of a policy that enforces (an
    override's block, ``"0/<period>"``, the deny cache) means no hit is
    counted: the pending ones are only looked at, so that every Decision
    (and Retry-After, the longest wait) is true. Uses of one key (a policy
    named twice for one identity) are decided as one hit of their summed
    cost, and share its Decision.

    Redis trouble: the hits of the slot that could not be decided get their
    policies' degraded Decisions (``fallback_rate``, else ``fail_open``).

    ``kept``: a list that receives the calls that counted hits (one per slot),
    what ``refund.lua`` takes back when a hit is given back after the
    response (``settling.py``); a hit alone is then decided by the script too.
    """
    pending, vetoed = split(made)
    if not pending:
        return [m for _, m in made]  # type: ignore[misc]  # no Pending: all Decisions
    merged = _merge(pending)
    if len(merged) == 1 and not vetoed and kept is None:
        answers = {merged[0].key: merged[0].policy.ask(merged[0])}
    else:
        answers = _decide_merged(merged, count=not vetoed, kept=kept)
    return _in_order(made, answers)


def _in_order(
    made: Sequence[tuple[Policy, Pending | Decision]], answers: dict[str, Decision]
) -> list[Decision]:
    return [answers[m.key] if type(m) is Pending else m for _, m in made]  # type: ignore[misc]


def _one_slot(merged: list[Pending]) -> bool:
    first = merged[0]
    backend = first.policy.backend
    slot = backend.slot_of(first.key)
    return all(hit.policy.backend is backend and backend.slot_of(hit.key) == slot for hit in merged)


def _merge(pending: list[Pending]) -> list[Pending]:
    by_key = {hit.key: hit for hit in pending}
    if len(by_key) == len(pending):
        return pending  # no key twice: the usual case
    by_key = {}
    for hit in pending:
        seen = by_key.get(hit.key)
        by_key[hit.key] = hit if seen is None else seen._replace(cost=seen.cost + hit.cost)
    return list(by_key.values())


def _decide_merged(
    merged: list[Pending], *, count: bool, kept: list[_Call] | None = None
) -> dict[str, Decision]:
    if _one_slot(merged):  # one server, Sentinel's primary, one identity on a cluster: one script
        return _decide_group(merged, count=count, kept=kept)
    groups = by_slot(merged)
    if not count:
        answers: dict[str, Decision] = {}
        for group in groups:
            answers.update(_decide_group(group, count=count))
        return answers
    return _decide_across(groups, kept)


def by_slot(merged: list[Pending]) -> list[list[Pending]]:
    """Return ``merged`` in groups of one backend and hash slot, in order of first seen."""
    groups: dict[tuple[int, int], list[Pending]] = {}
    for hit in merged:
        backend = hit.policy.backend
        groups.setdefault((id(backend), backend.slot_of(hit.key)), []).append(hit)
    return list(groups.values())


def _decide_group(
    group: list[Pending], *, count: bool, kept: list[_Call] | None = None
) -> dict[str, Decision]:
    """Decide the hits of one slot in one script; their Decisions by key (``kept``: as decide)."""
    try:
        call = _call(group, count=count)
    except RedisError:
        return {hit.key: hit.policy.unanswered(hit) for hit in group}
    if kept is not None and call.counted:
        kept.append(call)
    return call.answers(counted=call.counted)


class _Call:
    """One run of ``together.lua`` on one slot: what it was sent and what it answered."""

    def __init__(
        self,
        group: Sequence[Pending],
        sent: list[tuple[list[str], Sequence[int | str]]],
        reply: Sequence[Any],
        outcomes: list[Outcome],
    ) -> None:
        self.group = group
        self.sent = sent  # each hit's keys and parameters
        self.counted = bool(reply[0])
        self.now = int(reply[1])
        self.replies = reply[2:]
        self.outcomes = outcomes

    def answers(self, *, counted: bool) -> dict[str, Decision]:
        return {
            hit.key: hit.policy.answered(hit, outcome, counted=counted)
            for hit, outcome in zip(self.group, self.outcomes, strict=True)
        }

    def only(self, hits: Sequence[int]) -> _Call:
        """Return this call reduced to the hits at ``hits`` (indexes): what to refund of it."""
        part = object.__new__(_Call)
        part.group = [self.group[i] for i in hits]
        part.sent = [self.sent[i] for i in hits]
        part.counted, part.now = self.counted, self.now
        part.replies = [self.replies[i] for i in hits]
        part.outcomes = [self.outcomes[i] for i in hits]
        return part

    def vetoes(self) -> bool:
        """Return whether a policy that enforces denied (so nothing was counted)."""
        return any(
            not outcome.allowed and not _shadow(hit)
            for hit, outcome in zip(self.group, self.outcomes, strict=True)
        )


def _call(group: list[Pending], *, count: bool) -> _Call:
    first = group[0]
    measured = metrics()
    if measured is None:
        return first.policy.backend.run(first.key, run_script, group, count)
    began = time.perf_counter()
    call = first.policy.backend.run(first.key, run_script, group, count)
    measured.pending.observe(time.perf_counter() - began)
    return call


def run_script(node: RedisNode, first_key: str, group: Sequence[Pending], count: bool) -> _Call:
    """Run ``together.lua`` for ``group`` on ``node`` (``count``: count if none denies).

    :raises ClockError: if ``fixed_window``'s window is missed :data:`MAX_ATTEMPTS` times.
    """
    steps = _script_steps(node, group, count)
    try:
        exchange = next(steps)
        while True:
            exchange = steps.send(SCRIPT.run(node.client, *exchange))
    except StopIteration as done:
        call: _Call = done.value
        return call


Exchange = tuple[list[str], tuple[str, str], list[tuple[int | str, ...]]]


def _script_steps(
    node: RedisNode, group: Sequence[Pending], count: bool
) -> Generator[Exchange, Any, _Call]:
    """:func:`run_script`'s steps: each yields ``together.lua``'s KEYS, ARGV's head and
    segments, and is sent its reply; the drivers only make the exchange."""
    for attempt in range(MAX_ATTEMPTS):
        time_argument = node.script_time()
        entries = [hit.variant.algorithm.script_entry(node, hit.key) for hit in group]
        sent = time.monotonic()
        reply = yield _segments(group, entries, time_argument, count)
        received = time.monotonic()
        outcomes = [
            hit.variant.algorithm.script_outcome(node, answer, sent, received)
            for hit, answer in zip(group, reply[2:], strict=True)
        ]
        if None not in outcomes:
            return _Call(group, entries, reply, outcomes)  # type: ignore[arg-type]  # no None
        if attempt:
            node.clock.resync()  # still missed: the server's clock may have jumped
    raise ClockError(
        f"no current window found on the Redis server's clock in {MAX_ATTEMPTS} attempts"
    )


#: A hit's keys and its algorithm's parameters (``Algorithm.script_entry``).
Entry = tuple[list[str], tuple[int | str, ...]]


def _arguments(
    group: Sequence[Pending], entries: Sequence[Entry], time_argument: str, count: bool
) -> tuple[list[str], list[int | str]]:
    """Return ``together.lua``'s KEYS and ARGV for ``group`` (see the script's header)."""
    keys: list[str] = []
    argv: list[int | str] = [time_argument, "1" if count else "0"]
    for hit, (hit_keys, parameters) in zip(group, entries, strict=True):
        keys += hit_keys
        veto = "0" if _shadow(hit) else "1"
        argv += (script_name(hit.variant.algorithm), len(hit_keys), len(parameters), hit.cost, veto)
        argv += parameters
    return keys, argv


def _segments(
    group: Sequence[Pending], entries: Sequence[Entry], time_argument: str, count: bool
) -> tuple[list[str], tuple[str, str], list[tuple[int | str, ...]]]:
    """Return :func:`_arguments` as ``LuaScript.run`` takes them: KEYS, ARGV's head, its segments.

    A segment per hit: its part of ARGV, the same on nearly every request of
    a policy (a fixed window's changes once a window), whose encoding the
    script keeps (``LuaScript.encoded``; ``tests/backends/test_resp.py``).
    """
    keys: list[str] = []
    segments: list[tuple[int | str, ...]] = []
    for hit, (hit_keys, parameters) in zip(group, entries, strict=True):
        keys += hit_keys
        veto = "0" if _shadow(hit) else "1"
        name = script_name(hit.variant.algorithm)
        segments.append((name, len(hit_keys), len(parameters), hit.cost, veto, *parameters))
    return keys, (time_argument, "1" if count else "0"), segments


def refund(node: RedisNode, first_key: str, call: _Call) -> list[Outcome]:
    """Take back what ``call`` counted (``refund.lua``); return each hit's outcome after."""
    keys, argv = refund_arguments(node, call)
    sent = time.monotonic()
    replies = REFUND.run(node.client, keys, argv)
    return refunded(node, call, replies, sent, time.monotonic())


def refund_arguments(node: RedisNode, call: _Call) -> tuple[list[str], list[int | str]]:
    """Return ``refund.lua``'s KEYS and ARGV for ``call``."""
    keys: list[str] = []
    argv: list[int | str] = [node.script_time(), call.now]
    for hit, (hit_keys, parameters), done in zip(call.group, call.sent, call.replies, strict=True):
        keys += hit_keys
        name = script_name(hit.variant.algorithm)
        argv += (name, len(hit_keys), len(parameters), len(done), hit.cost, *parameters, *done)
    return keys, argv


def refunded(
    node: RedisNode, call: _Call, replies: Sequence[Any], sent: float, received: float
) -> list[Outcome]:
    """Return each hit's outcome after ``refund.lua`` answered ``replies``."""
    outcomes = []
    for hit, reply in zip(call.group, replies, strict=True):
        outcome = hit.variant.algorithm.script_outcome(node, reply, sent, received)
        # A fixed window whose window ended meanwhile: nothing left to take back.
        outcomes.append(outcome or Outcome(True, hit.variant.limit, 0, 0))
    return outcomes


def _decide_across(
    groups: list[list[Pending]], kept: list[_Call] | None = None
) -> dict[str, Decision]:
    """Decide hits on several slots (a cluster): reserve, then refund if one slot denies.

    The slots are asked one after another, each counting its hits if none
    of its policies denies (one script each). When a slot denies, the hits
    already counted on the slots before it are taken back (``refund.lua``,
    one script per slot: exact, as if never counted) and the slots after it
    are only looked at. So no policy ever holds more than its limit, and a
    denied request leaves no charge; while a reservation is pending (from
    its count to its refund: the round trips of the later slots and of the
    refund, bounded by the socket timeout), a concurrent request may be
    refused because of it. Round trips: one per slot, plus one per slot
    refunded. A refund Redis cannot make leaves that slot's hits counted
    (never over the limit; logged by the node).

    Redis trouble on a slot: its hits get degraded Decisions; when one of
    them denies (``FAIL_OPEN`` False, a fallback at its limit), the request
    is denied and the reservations are refunded as above.
    """
    steps = across_steps(groups, kept)
    try:
        step = next(steps)
        while True:
            kind, argument = step
            if kind == "look":
                step = steps.send(_decide_group(argument, count=False))
                continue
            try:
                if kind == "count":
                    result: Any = _call(argument, count=True)
                else:  # "refund"
                    first = argument.group[0]
                    result = first.policy.backend.run(first.key, refund, argument)
            except RedisError as exc:
                result = exc
            step = steps.send(result)
    except StopIteration as done:
        answers: dict[str, Decision] = done.value
        return answers


#: A step of :func:`across_steps`: ``("look", group)`` (sent its Decisions by
#: key), ``("count", group)`` (sent its ``_Call``), ``("refund", call)`` (sent
#: the outcomes); a ``RedisError`` is sent in place of a call's or a refund's answer.
AcrossStep = tuple[str, Any]


def across_steps(
    groups: list[list[Pending]], kept: list[_Call] | None = None
) -> Generator[AcrossStep, Any, dict[str, Decision]]:
    """:func:`_decide_across`'s steps; the sync and the async driver make the exchanges.

    ``kept``: receives the calls that counted, when every slot counted (see :func:`decide`).
    """
    answers: dict[str, Decision] = {}
    reserved: list[_Call] = []
    denied = False
    for group in groups:
        if denied:
            answers.update((yield "look", group))
            continue
        call = yield "count", group
        if isinstance(call, RedisError):
            degraded = {hit.key: hit.policy.unanswered(hit) for hit in group}
            answers.update(degraded)
            denied = any(not degraded[hit.key].allowed and not _shadow(hit) for hit in group)
            continue
        if call.counted:
            reserved.append(call)
            answers.update(call.answers(counted=True))
        else:
            denied = True
            answers.update(call.answers(counted=False))
    if not denied and kept is not None:
        kept.extend(reserved)
    if denied:
        for call in reserved:
            outcomes = yield "refund", call
            if isinstance(outcomes, RedisError):
                continue  # left counted: never over the limit
            for hit, outcome in zip(call.group, outcomes, strict=True):
                answers[hit.key] = hit.policy.answered(hit, outcome, counted=False)
    return answers


def _shadow(hit: Pending) -> bool:
    """Return whether ``hit``'s denial refuses nothing: shadow mode, or outside the percent."""
    policy = hit.policy
    return policy.shadow or (policy.partial and outside(policy, hit.identity))
