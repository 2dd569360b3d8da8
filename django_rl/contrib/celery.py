"""Celery tasks limited across every worker: :class:`RateLimitedTask`.

Celery's own ``rate_limit`` counts per worker process, so 10/s on 8 workers
is 80/s. A task whose base is :class:`RateLimitedTask` is counted in Redis
by django_rl's policies before each run, whatever process runs it::

    @app.task(base=RateLimitedTask, rate_policies=["stripe"],
              rate_key=lambda customer_id, **kw: f"customer:{customer_id}")
    def charge(customer_id, amount): ...

Before the task's body runs, its ``rate_policies`` are hit together (one
round trip: ``hit_many``) for the identity ``rate_key(*args, **kwargs)``
returns (``"global"`` without a ``rate_key``: one limit for every run). A
denied run is not executed: it is published again, same id, arguments and
options (its chain, group, chord and callbacks), with ``countdown`` = the
longest Retry-After of the denying policies, and ends in Celery's ``RETRY``
state (logged at INFO, never ERROR). Such a delay leaves
``request.retries`` as it was, so it never counts against ``max_retries``.

A run that a ``fixed_window`` policy allows in the last ``rate_start_margin``
seconds of its window (default 0.2) is re-scheduled to the next window the
same way (it keeps its count in the window ending): a task starts in the
window that counted it, so "20/s" means at most 20 task starts in each
second of the server's clock, not 20 decisions and some starts a moment
later, in the next second (a busy worker's process may take tens of ms from
the decision to the task's first line).

Run eagerly (``task_always_eager``, ``apply()``, or called directly), a
denied run raises :class:`~django_rl.exceptions.RateLimited` instead, at
the call (``apply`` decides before Celery traces the run, so
``task_eager_propagates`` does not turn it into a failed result).

A ``rate_key`` that raises, or returns anything but a non-empty string or
an integer, never loses the task: the run is limited under the one shared
identity ``"global"``, and one WARNING per task and cause is logged on
logger ``django_rl``. While Redis cannot answer, the policies' ``fail_open``
and ``fallback_rate`` decide, as for views. ``manage.py check`` reports the
policies of every imported subclass that do not exist
(``contrib/celery_checks.py``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import Any

from celery import Task
from celery.exceptions import Reject, Retry

from django_rl.algorithms.fixed_window import FixedWindow
from django_rl.core.decision import Decision
from django_rl.exceptions import RateLimited
from django_rl.leases import release
from django_rl.policies.programmatic import hit_many
from django_rl.policies.registry import get_policy

__all__ = ["SHARED_IDENTITY", "RateLimitedTask"]

logger = logging.getLogger("django_rl")

#: The identity of a run without ``rate_key``, and of one whose ``rate_key`` failed.
SHARED_IDENTITY = "global"

#: The Decisions ``apply()`` made for the run it is about to trace (``__call__`` takes them).
_decided: ContextVar[list[Decision] | None] = ContextVar("django_rl_task_decided", default=None)

_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


class RateLimitedTask(Task):  # type: ignore[misc]  # celery has no type hints
    """A Celery ``Task`` base class whose runs are limited by django_rl policies.

    :cvar rate_policies: the names of the policies each run is counted by.
    :cvar rate_key: a callable of the task's arguments (``*args, **kwargs``)
        returning the identity counted (``"global"`` when ``None``).
    :cvar rate_cost: the cost of one run (default 1).
    :cvar rate_start_margin: a run a ``fixed_window`` policy allows closer
        than this (seconds) to its window's end runs in the next window
        instead (0: never).
    """

    rate_policies: Sequence[str] = ()
    rate_key: Callable[..., object] | None = None
    rate_cost: int = 1
    rate_start_margin: float = 0.2

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _decided.get() is not None:  # apply() decided this run already
            _decided.set(None)
            return super().__call__(*args, **kwargs)
        decisions = self.rate_decisions(args, kwargs)
        denied = [d for d in decisions if d.denies]
        if denied:
            self.rate_limited(decisions, denied)
        elif decisions and not self._eager():
            ending = _window_ending(decisions, self.rate_start_margin)
            if ending is not None:
                _give_back(decisions)
                names = ", ".join(d.policy for d in decisions)
                self._run_later(ending, f"the window of {names} ending")
        try:
            return super().__call__(*args, **kwargs)
        finally:
            _give_back(decisions)

    def apply(self, args: Any = None, kwargs: Any = None, *more: Any, **options: Any) -> Any:
        """Run eagerly (``apply``, ``task_always_eager``): a denied run raises ``RateLimited``
        here, at the call, whatever ``task_eager_propagates`` says."""
        decisions = self.rate_decisions(args or (), kwargs or {})
        if any(d.denies for d in decisions):
            raise RateLimited(decisions)
        token = _decided.set(decisions)
        try:
            return super().apply(args, kwargs, *more, **options)
        finally:
            _decided.reset(token)
            _give_back(decisions)

    def rate_identity(self, args: Sequence[Any], kwargs: dict[str, Any]) -> str:
        """Return the identity this run counts as: ``rate_key``'s, or :data:`SHARED_IDENTITY`."""
        # Read on the class: a plain function there must not become a bound method.
        key = getattr(type(self), "rate_key", None)
        if key is None:
            return SHARED_IDENTITY
        try:
            identity = key(*args, **kwargs)
        except Exception as exc:  # a task is never lost for its key
            self._warn_once(f"raised {type(exc).__name__}: {exc}", type(exc).__name__)
            return SHARED_IDENTITY
        if isinstance(identity, int) and not isinstance(identity, bool):
            return str(identity)
        if not isinstance(identity, str) or not identity:
            self._warn_once(f"returned {identity!r}", f"junk {type(identity).__name__}")
            return SHARED_IDENTITY
        return identity

    def rate_decisions(self, args: Sequence[Any], kwargs: dict[str, Any]) -> list[Decision]:
        """Hit every policy of ``rate_policies`` for this run, together: one round trip."""
        if not self.rate_policies:
            return []
        identity = self.rate_identity(args, kwargs)
        return hit_many((name, identity, self.rate_cost) for name in self.rate_policies)

    def rate_limited(self, decisions: list[Decision], denied: list[Decision]) -> None:
        """A denied run: raise ``RateLimited`` (eager, direct) or publish it again and ``Retry``."""
        if self._eager():
            raise RateLimited(decisions)
        names = ", ".join(dict.fromkeys(d.policy for d in denied))
        self._run_later(max(d.retry_after for d in denied), f"rate limited by {names}")

    def _eager(self) -> bool:
        request = self.request
        return bool(request.called_directly or request.is_eager)

    def _run_later(self, countdown: float, why: str) -> None:
        """Publish this run again in ``countdown`` seconds and end this one (``Retry``)."""
        request = self.request
        # The request as it came, its retries unchanged: this delay is no retry.
        again = self.signature_from_request(request, countdown=countdown, retries=request.retries)
        try:
            again.apply_async()
        except Exception as exc:  # the broker refused it: back to the queue, never lost
            raise Reject(exc, requeue=True) from exc
        logger.info("Task %s[%s] %s: runs again in %.3f s", self.name, request.id, why, countdown)
        raise Retry(why, when=countdown, sig=again)

    def _warn_once(self, what: str, cause: str) -> None:
        with _warned_lock:
            if (self.name, cause) in _warned:
                return
            _warned.add((self.name, cause))
        logger.warning(
            "Task %s: its rate_key %s; its runs are limited under the shared identity %r "
            "until it returns a non-empty string (logged once per task and cause).",
            self.name,
            what,
            SHARED_IDENTITY,
        )


def _give_back(decisions: list[Decision]) -> None:
    if any(d.lease is not None for d in decisions):
        release(decisions)


def _window_ending(decisions: list[Decision], margin: float) -> float | None:
    """Return the time left in a fixed window that allowed this run, if under ``margin``."""
    for decision in decisions:
        if decision.degraded or decision.reset_after >= margin:
            continue
        try:
            algorithm = get_policy(decision.policy).algorithm
        except Exception:  # a policy gone since (settings changed): nothing to wait for
            continue
        if isinstance(algorithm, FixedWindow):
            return max(decision.reset_after, 0.001)
    return None
