"""The DRF drop-in's ``history``: the times of the requests a throttle's sliding log holds.

DRF keeps a list of the times of the requests it allowed in the window, newest
first, and code written for DRF reads it (``throttle.history``, and
``wait()``, whose pace after an allowed request is the time before the oldest
of them leaves the window, per request left). The drop-in keeps that list in
Redis, as the sliding log of its policy (one entry per allowed request,
scored by its time in ms), and reads it only when asked: a decision never
does. On the decisions' clock: the Redis server's, or the time a replaced
``timer`` gives.
"""

from __future__ import annotations

from typing import Any

from redis.exceptions import RedisError

from django_rl.backends.node import RedisNode
from django_rl.core.policy import Policy


def read_log(
    policy: Policy, identity: str, given: float | None = None
) -> tuple[float, list[float]] | None:
    """Return ``(now, times)`` of ``identity``'s log, in seconds; ``None`` if Redis cannot say.

    ``times`` are those of the entries still in the window at ``now``, newest
    first, as DRF's ``history``. ``now`` is ``given`` (a replaced ``timer``),
    or else the Redis server's time.

    :param policy: a DRF drop-in's policy (a sliding log at one rate).
    """
    window_ms = policy.algorithm.rate.period_ms  # type: ignore[attr-defined]
    given_ms = None if given is None else int(given * 1000)
    try:
        return policy.backend.run(policy.key(identity), _read, window_ms, given_ms)
    except RedisError:
        return None  # the node logged its outage once, as for a decision


def _read(
    node: RedisNode, key: str, window_ms: int, given_ms: int | None
) -> tuple[float, list[float]]:
    now_ms = node.now_ms() if given_ms is None else given_ms
    # An entry is in the window while now < its score + the window. Scores
    # never go down, so one later than now (a clock that stepped back) is in.
    horizon = now_ms - window_ms

    def queue(pipe: Any) -> None:
        pipe.zrevrangebyscore(key, "+inf", f"({horizon}", withscores=True)

    _, (entries,) = node.pipeline(queue)
    return now_ms / 1000, [score / 1000 for _member, score in entries]
