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
* **Several slots** (a cluster, policies of different identities): see
  :func:`_decide_across`.
* A policy in shadow mode never denies the request: it is counted when the
  others allow, and its own denial counts nothing, as alone.
* A Decision of a hit that was not counted (another policy denied) reports
  its policy's state without the hit: ``remaining`` as it is, ``allowed``
  whether it alone would have allowed the hit.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from django_rl.algorithms import Outcome
from django_rl.algorithms.base import PRELUDE
from django_rl.backends import LuaScript
from django_rl.backends.clock import ClockError
from django_rl.observability.metrics import metrics
from django_rl.policy import Pending, Policy

if TYPE_CHECKING:
    from django_rl.backends import RedisNode
    from django_rl.decision import Decision

#: The algorithms a script of several policies can hold: each a ``<name>.lua``.
FRAGMENTS = (
    "fixed_window", "sliding_log", "token_bucket", "gcra", "sliding_window", "concurrency",
)  # fmt: skip

SCRIPT = LuaScript.from_parts(
    "django_rl.algorithms",
    (PRELUDE, *(f"{name}.lua" for name in FRAGMENTS), "together.lua"),
    "",
    name="together.lua",
)

#: Attempts before a decision gives up because ``fixed_window``'s estimate of
#: the server's window keeps missing (as ``fixed_window.MAX_ATTEMPTS``).
MAX_ATTEMPTS = 4


def decide(made: Sequence[tuple[Policy, Pending | Decision]]) -> list[Decision]:
    """Decide ``made`` (each policy's hit, or its Decision made without Redis) together.

    A Decision given that denies on behalf of a policy that enforces (an
    override's block, ``"0/<period>"``, the deny cache) means no hit is
    counted: the pending ones are only looked at, so that every Decision
    (and Retry-After, the longest wait) is true. Uses of one key (a policy
    named twice for one identity) are decided as one hit of their summed
    cost, and share its Decision.

    Redis trouble: the hits of the slot that could not be decided get their
    policies' degraded Decisions (``fallback_rate``, else ``fail_open``).
    """
    pending = [m for _, m in made if isinstance(m, Pending)]
    if not pending:
        return [m for _, m in made]  # type: ignore[misc]  # no Pending: all Decisions
    vetoed = any(
        not m.allowed and not policy.shadow for policy, m in made if not isinstance(m, Pending)
    )
    merged = _merge(pending)
    if len(merged) == 1 and not vetoed:
        answers = {merged[0].key: merged[0].policy.ask(merged[0])}
    else:
        answers = _decide_merged(merged, count=not vetoed)
    return [answers[m.key] if isinstance(m, Pending) else m for _, m in made]


def _merge(pending: list[Pending]) -> list[Pending]:
    by_key: dict[str, Pending] = {}
    for hit in pending:
        seen = by_key.get(hit.key)
        by_key[hit.key] = hit if seen is None else seen._replace(cost=seen.cost + hit.cost)
    return list(by_key.values())


def _decide_merged(merged: list[Pending], *, count: bool) -> dict[str, Decision]:
    groups: dict[tuple[int, int], list[Pending]] = {}
    for hit in merged:
        backend = hit.policy.backend
        groups.setdefault((id(backend), backend.slot_of(hit.key)), []).append(hit)
    if len(groups) == 1 or not count:
        answers: dict[str, Decision] = {}
        for group in groups.values():
            answers.update(_decide_group(group, count=count))
        return answers
    return _decide_across(list(groups.values()))


def _decide_group(group: list[Pending], *, count: bool) -> dict[str, Decision]:
    """Decide the hits of one slot in one script; their Decisions by key."""
    first = group[0]
    measured = metrics()
    began = time.perf_counter()
    try:
        counted, outcomes = first.policy.backend.run(first.key, run_script, group, count)
    except RedisError:
        return {hit.key: hit.policy.unanswered(hit) for hit in group}
    if measured is not None:
        measured.pending.observe(time.perf_counter() - began)
    return {
        hit.key: hit.policy.answered(hit, outcome, counted=counted)
        for hit, outcome in zip(group, outcomes, strict=True)
    }


def run_script(
    node: RedisNode, first_key: str, group: Sequence[Pending], count: bool
) -> tuple[bool, list[Outcome]]:
    """Run ``together.lua`` for ``group`` on ``node``; return whether it counted, and the outcomes.

    :raises ClockError: if ``fixed_window``'s window is missed :data:`MAX_ATTEMPTS` times.
    """
    for attempt in range(MAX_ATTEMPTS):
        keys: list[str] = []
        argv: list[int | str] = [node.script_time(), "1" if count else "0"]
        for hit in group:
            algorithm = hit.variant.algorithm
            hit_keys, parameters = algorithm.script_entry(node, hit.key)
            keys += hit_keys
            veto = "0" if hit.policy.shadow else "1"
            argv += (algorithm.name, len(hit_keys), len(parameters), hit.cost, veto, *parameters)
        sent = time.monotonic()
        reply = SCRIPT(node.client, keys, argv)
        received = time.monotonic()
        outcomes = [
            hit.variant.algorithm.script_outcome(node, answer, sent, received)
            for hit, answer in zip(group, reply[1:], strict=True)
        ]
        if None not in outcomes:
            return bool(reply[0]), outcomes  # type: ignore[return-value]  # no None
        if attempt:
            node.clock.resync()  # still missed: the server's clock may have jumped
    raise ClockError(
        f"no current window found on the Redis server's clock in {MAX_ATTEMPTS} attempts"
    )


def _decide_across(groups: list[list[Pending]]) -> dict[str, Decision]:
    """Decide hits on several slots (a cluster): see the module's docstring."""
    raise NotImplementedError
