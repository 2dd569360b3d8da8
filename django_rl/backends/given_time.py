"""A time the caller gives a decision, instead of the Redis server's clock.

For the DRF drop-in alone: DRF's throttles read ``self.timer()``, and test
suites written for DRF replace it (``throttle.timer = lambda: 1000.0``, as
DRF's own tests do) to move time on without waiting. When a drop-in
throttle's ``timer`` is not ``time.time``, its decisions are made at the time
it gives, so such suites keep working after the switch.

Only the script algorithms take it (it is their time argument, as with
``CLOCK: "app"``); the deny cache, which keeps time by this process's own
clock, is neither asked nor told while a time is given. Each Redis script
still never moves a log's scores back, so a given time earlier than what a
key has seen counts as that key's newest time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_given: ContextVar[int | None] = ContextVar("django_rl_given_time_ms", default=None)


#: ``given_ms()``: the time (ms since the epoch) decisions are made at here;
#: ``None``: the server's. The ContextVar's own ``get``, called on every
#: decision: no Python frame.
given_ms: Callable[[], int | None] = _given.get


@contextmanager
def decisions_at(ms: int) -> Iterator[None]:
    """Make the decisions of this block (this thread or task) at ``ms`` since the epoch."""
    token = _given.set(ms)
    try:
        yield
    finally:
        _given.reset(token)
