"""A request's standing on several policies, counting nothing (``django_rl.usage``, ``ausage``).

Each policy's look is :meth:`Policy.peek`'s own (``peeking.py``): the
selection step (an override, the rate, an exemption, limits off), then the
algorithm's ``queue_peek`` (the commands of its ``peek``), then the same
Decision (the outage fallback's or ``fail_open``'s when Redis cannot
answer; marked shadow as the policy's hits are). What differs is only the
exchange: the looks of every policy whose key lives on one node go out in
one pipeline, so 5 policies of any algorithms cost one round trip where
their keys share a node (one server, Sentinel's primary, one identity on a
cluster), one per node otherwise.

The steps are one generator (:func:`look_steps`) that yields each node's
group of looks and is sent their outcomes (or the ``RedisError``); the sync
driver (:func:`peek_many`) and the async one (:func:`apeek_many`) make only
the exchange. A group that meets an error reply (a slot that moved, a
script error) is looked at again one policy at a time; a group whose node
cannot answer gets its policies' degraded Decisions at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Generator, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from asgiref.sync import sync_to_async
from redis.exceptions import RedisError, ResponseError

from django_rl.algorithms import Outcome
from django_rl.backends.aio_node import apipeline, arun, async_capable
from django_rl.core.async_identities import aidentify
from django_rl.core.decision import Decision
from django_rl.policies.peeking import peek_decision, peek_marked, selection
from django_rl.policies.plans import Variant
from django_rl.policies.registry import Policy, get_policy

if TYPE_CHECKING:
    from redis.client import Pipeline

    from django_rl.backends import RedisNode

logger = logging.getLogger("django_rl")


class Look(NamedTuple):
    """One policy's look at one identity's state, read on Redis."""

    at: int
    policy: Policy
    identity: str
    variant: Variant
    key: str


def usage(request: Any, policies: Iterable[Policy | str]) -> list[Decision]:
    """Return ``request``'s standing on each of ``policies`` that applies, counting nothing.

    ``policies``: names or :class:`Policy` objects. One Decision per policy
    that applies to the request, in the given order: a policy whose key
    does not apply (``user`` for an anonymous request), whose rate is
    ``None``, or whose key or rate function raises (logged) is left out.
    Each Decision is what :meth:`Policy.peek` would say; one round trip
    where the keys share a node, whatever the algorithms.

    :raises ConfigurationError: for an unknown name or a policy that fails its checks.
    """
    # (The identity is found here, once per identity function, as the front
    # doors find it; the rest is peek's own steps, in look_steps.)
    chosen = _policies(policies)
    known: dict[Any, str | None] = {}
    looks: list[tuple[Policy, str]] = []
    for policy in chosen:
        if policy.limits_nothing:
            continue
        try:
            identify = policy.identify
            if identify not in known:
                known[identify] = identify(request)
            identity = known[identify]
        except Exception as exc:
            log_left_out(policy.name, exc)
            continue
        if identity is not None:
            looks.append((policy, identity))
    return peek_many(looks, request)


async def ausage(request: Any, policies: Iterable[Policy | str]) -> list[Decision]:
    """:func:`usage` on the event loop: identities and per-plan rates asked first (as the
    async front doors ask them), the looks' one pipeline per node awaited."""
    chosen = _policies(policies)
    known: dict[Any, str | None] = {}
    looks: list[tuple[Policy, str]] = []
    for policy in chosen:
        if policy.limits_nothing:
            continue
        try:
            identify = policy.identify
            if identify not in known:
                known[identify] = await aidentify(identify, request)
            identity = known[identify]
            if identity is not None and policy.rates is not None:
                await policy.rates.arate_for(request)
        except Exception as exc:
            log_left_out(policy.name, exc)
            continue
        if identity is not None:
            looks.append((policy, identity))
    return await apeek_many(looks, request)


def _policies(policies: Iterable[Policy | str]) -> list[Policy]:
    return [get_policy(p) if isinstance(p, str) else p for p in policies]


#: Seconds between two log lines of one policy and cause (as ``shadow.INTERVAL``).
LOG_INTERVAL = 600.0
#: When each (policy, cause) was last logged; bounded as ``shadow.MAX_CAUSES``.
_logged: dict[tuple[str, str], float] = {}
_logged_lock = threading.Lock()


def log_left_out(name: str, exc: Exception, why: str = "its key or rate function raised") -> None:
    """Log (once per policy and cause every :data:`LOG_INTERVAL`) a policy left out."""
    cause = f"{type(exc).__module__}.{type(exc).__qualname__}"
    now = time.monotonic()
    with _logged_lock:
        last = _logged.get((name, cause))
        if last is not None and now - last < LOG_INTERVAL:
            return
        if last is None and len(_logged) >= 1024:
            _logged.clear()
        _logged[(name, cause)] = now
    logger.warning(
        "django_rl: usage left policy %r out: %s %s: %s "
        "(logged at most once every %g s per policy and cause)",
        name, why, cause, exc, LOG_INTERVAL,
    )  # fmt: skip


def peek_many(looks: Sequence[tuple[Policy, str]], request: Any = None) -> list[Decision]:
    """Peek ``(policy, identity)`` pairs: one pipeline per node; Decisions in order."""
    steps = look_steps(looks, request)
    try:
        group = next(steps)
        while True:
            try:
                answer: Any = group[0].policy.backend.run(group[0].key, _read, group)
            except RedisError as exc:
                answer = exc
            group = steps.send(answer)
    except StopIteration as done:
        decisions: list[Decision] = done.value
        return decisions


async def apeek_many(looks: Sequence[tuple[Policy, str]], request: Any = None) -> list[Decision]:
    """:func:`peek_many` awaited: the same steps, each node's pipeline on the event loop."""
    steps = look_steps(looks, request)
    try:
        group = next(steps)
        while True:
            first = group[0]
            try:
                if async_capable(first.policy.backend):
                    answer: Any = await arun(first.policy.backend, first.key, _aread, group)
                else:
                    run = sync_to_async(first.policy.backend.run, thread_sensitive=False)
                    answer = await run(first.key, _read, group)
            except RedisError as exc:
                answer = exc
            group = steps.send(answer)
    except StopIteration as done:
        decisions: list[Decision] = done.value
        return decisions


def look_steps(
    looks: Sequence[tuple[Policy, str]], request: Any
) -> Generator[list[Look], Any, list[Decision]]:
    """The steps of :func:`peek_many`: yields each node's looks, is sent their outcomes.

    Sent a ``RedisError`` instead: an error reply (``ResponseError``: a slot
    on the move, a script error) has each look of the group asked again alone;
    any other error (the node does not answer) degrades the group's Decisions.
    """
    decided: list[Decision | None] = []
    left_out: set[int] = set()
    groups: dict[tuple[int, int], list[Look]] = {}
    for index, (policy, identity) in enumerate(looks):
        try:
            chosen = selection(policy, identity, request)
        except Exception as exc:
            if request is None:
                raise  # a per-plan policy looked at without a request: TypeError, as peek
            log_left_out(policy.name, exc)  # its rate function raised: the request's look goes on
            decided.append(None)
            left_out.add(index)
            continue
        if type(chosen) is not Variant:
            decided.append(peek_marked(policy, identity, chosen))  # type: ignore[arg-type]
            continue
        decided.append(None)
        key = policy.variant_key(chosen, identity)
        look = Look(index, policy, identity, chosen, key)
        try:
            node = policy.backend.node_for(key)
        except RedisError:
            decided[index] = _decision(look, None)
            continue
        groups.setdefault((id(policy.backend), id(node)), []).append(look)
    for group in groups.values():
        answer = yield group
        if isinstance(answer, ResponseError) and len(group) > 1:
            answers = []
            for look in group:
                alone = yield [look]
                answers.append(None if isinstance(alone, RedisError) else alone[0])
        elif isinstance(answer, RedisError):
            answers = [None] * len(group)
        else:
            answers = answer
        for look, outcome in zip(group, answers, strict=True):
            decided[look.at] = _decision(look, outcome)
    return [d for i, d in enumerate(decided) if i not in left_out]  # type: ignore[misc]


def _decision(look: Look, outcome: Outcome | None) -> Decision:
    decision = peek_decision(look.policy, look.variant, look.identity, outcome)
    return peek_marked(look.policy, look.identity, decision)


def _queue(group: Sequence[Look], node: RedisNode) -> Any:
    def queue(pipe: Pipeline) -> list[Any]:
        return [look.variant.algorithm.queue_peek(pipe, node, look.key) for look in group]

    return queue


def _outcomes(readers: list[Any], replies: list[Any]) -> list[Outcome]:
    stream: Iterator[Any] = iter(replies)
    return [read(stream).outcome for read in readers]


def _read(node: RedisNode, key: str, group: Sequence[Look]) -> list[Outcome]:
    """Every look of ``group`` on ``node``, in one pipeline: one round trip."""
    readers, replies = node.pipeline(_queue(group, node))
    return _outcomes(readers, replies)


async def _aread(node: RedisNode, key: str, group: Sequence[Look]) -> list[Outcome]:
    """:func:`_read`, awaited (``apipeline``)."""
    readers, replies = await apipeline(node, _queue(group, node))
    return _outcomes(readers, replies)
