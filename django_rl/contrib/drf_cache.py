"""``throttle.cache`` of the DRF drop-in: DRF's cache calls on its logs in Redis.

A DRF throttle keeps its history (the times of the requests it allowed,
newest first) in Django's cache under its cache key. Subclasses written for
DRF read and write it themselves: they copy DRF's ``allow_request`` body
(``self.history = self.cache.get(self.key, [])``) or its
``throttle_success`` (``self.cache.set(self.key, self.history,
self.duration)``). The drop-in keeps that history in Redis, as the sliding
log of its policy of the throttle's scope and rate (``throttle_policies.py``), so
on an instance ``cache`` is a :class:`ThrottleLogs` over those logs: what it
reads is what the drop-in counted, and what it writes the drop-in's
decisions see. Django Ninja's drop-in (``ninja.py``) shares it. Imports no DRF.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

from redis.exceptions import RedisError

from django_rl.algorithms.sliding_log import SlidingLog
from django_rl.backends.given_time import decisions_at
from django_rl.contrib.throttle_policies import ThrottlePolicies
from django_rl.policies.policy import Policy


class Throttle(Protocol):
    """What :class:`ThrottleLogs` reads of a drop-in throttle."""

    _rl_policies: ClassVar[ThrottlePolicies]
    scope: str | None
    num_requests: int | None
    duration: int | None

    def timer(self) -> float: ...


class ThrottleLogs:
    """DRF's cache API (``get``, ``set``, ``delete``) on one throttle's logs, keyed by cache key.

    The logs are those of the throttle's scope at its rate now; a throttle
    without a rate, or at ``"0/<period>"``, has none (``get`` gives the
    default, ``set`` and ``delete`` change nothing). Redis unable to answer:
    ``get`` gives the default, as a cache miss, and writes are lost, as a
    cache's are.
    """

    __slots__ = ("_throttle",)

    def __init__(self, throttle: Throttle) -> None:
        self._throttle = throttle

    def _policy(self) -> tuple[Policy, SlidingLog] | None:
        throttle = self._throttle
        if throttle.num_requests is None or throttle.duration is None:
            return None
        policy = throttle._rl_policies.policy_for(
            throttle.scope, throttle.num_requests, throttle.duration
        )
        log = policy.algorithm
        return (policy, log) if isinstance(log, SlidingLog) else None

    def get(self, key: Any, default: Any = None) -> Any:
        """Return the history under ``key``: times in seconds, newest first, of the window now.

        ``default`` when it holds none. One round trip, at the time
        decisions are made (the throttle's replaced ``timer``'s, else the
        Redis server's).
        """
        found = self._policy()
        if found is None:
            return default
        policy, log = found
        given = given_ms(self._throttle)
        try:
            _, times = policy.backend.run(policy.key(str(key)), log.times, given)
        except RedisError:
            return default  # the node logged its outage once, as for a decision
        return [t / 1000 for t in times] if times else default

    def set(self, key: Any, value: Sequence[float], timeout: Any = None, **kwargs: Any) -> None:
        """Make the log under ``key`` hold one request at each time of ``value`` (seconds).

        DRF's ``throttle_success`` writes its history back so. Unlike the
        drop-in's own counting, it replaces what is there: a request counted
        meanwhile by another process is lost, as with DRF. The log keeps its
        own TTL (until its newest request leaves the window): ``timeout`` is
        not used.
        """
        self._write(key, sorted(round(t * 1000) for t in value))

    def delete(self, key: Any) -> bool:
        """Forget the history under ``key``; return whether Redis answered."""
        return self._write(key, [])

    def _write(self, key: Any, times: list[int]) -> bool:
        found = self._policy()
        return found is not None and change_log(self._throttle, found[0], str(key), "set", times)


#: ``time.time`` as it was when this module was imported. freezegun replaces
#: ``time.time`` in modules (their attributes that hold it: hence a tuple) but
#: not in classes: a throttle's ``timer`` left as the class's is then this
#: one, and is not "replaced" (decisions go by the decisions' clock, which
#: with ``CLOCK: "app"`` freezegun moves).
_AT_IMPORT = (time.time,)


def timer_replaced(timer: object) -> bool:
    """Return whether a throttle's ``timer`` is its own (a project's, a test's), not the clock's."""
    return timer is not time.time and timer is not _AT_IMPORT[0]


def given_ms(throttle: Throttle, now: float | None = None) -> int | None:
    """Return the time decisions for ``throttle`` are made at, in ms; ``None``: the server's.

    A replaced ``timer`` gives it (``now``, else what it says now); left as
    ``time.time``, the Redis server's clock decides.
    """
    if not timer_replaced(throttle.timer):  # an instance's: left as the class's, or replaced
        return None
    return int((throttle.timer() if now is None else now) * 1000)


def change_log(
    throttle: Throttle,
    policy: Policy,
    key: str,
    what: str,
    times: Sequence[int] = (),
    now: float | None = None,
) -> bool:
    """Change ``key``'s log of ``policy`` (``SlidingLog.change``); return whether Redis did.

    At :func:`given_ms` time. A static rate (``"0/<period>"``) keeps no log:
    nothing to change.
    """
    log = policy.algorithm
    if not isinstance(log, SlidingLog):
        return False
    given = given_ms(throttle, now)
    try:
        if given is None:
            policy.backend.run(policy.key(key), log.change, what, times)
        else:
            with decisions_at(given):
                policy.backend.run(policy.key(key), log.change, what, times)
    except RedisError:
        return False  # the node logged its outage once, as for a decision
    return True


class ThrottleLogsDescriptor:
    """``SimpleRateThrottle.cache``: on an instance, its :class:`ThrottleLogs`."""

    def __get__(self, throttle: Any, owner: Any = None) -> Any:
        if throttle is None:
            return self
        return ThrottleLogs(throttle)


__all__ = ["ThrottleLogs", "ThrottleLogsDescriptor", "change_log", "given_ms"]
