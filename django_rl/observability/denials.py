"""Reporting a denied request: the ``rate_limited`` signal and the denial log.

One line per denied request on the ``django_rl.denials`` logger at INFO,
naming the policy, the identity and the Retry-After (a shadow policy's
would-be denials too, said as such). A flood must not flood the logs, so
each process writes at most :data:`LINES_PER_SECOND` such lines in any
second of its monotonic clock; the lines over that are counted, not
written, and the next line written says how many were left out and since
when. The logger is checked first: with INFO off for it (Python's default:
only WARNING and above reach the root logger's handlers), a denial costs no
formatting at all.

The identity is written with ``repr`` (quoted, escaped, cut short): a
client-chosen header value cannot forge log lines or make them long.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from typing import Any

from django_rl.core.decision import Decision
from django_rl.core.reprs import short_repr
from django_rl.signals import identity_blocked, rate_limited

denials_logger = logging.getLogger("django_rl.denials")
logger = logging.getLogger("django_rl")

#: The most denial lines one process writes in a second.
LINES_PER_SECOND = 10


class LineBudget:
    """At most ``per_second`` lines in each second of the monotonic clock; counts the rest.

    Thread-safe: the count and the second are read and changed under a lock,
    so threads cannot both take the last line of a second.
    """

    def __init__(self, per_second: int) -> None:
        self.per_second = per_second
        self._lock = threading.Lock()
        self._second = -1
        self._used = 0
        #: Lines left out since the last line written, and when the first was.
        self.dropped = 0
        self._dropped_since = 0.0

    def reset(self) -> None:
        """Start afresh: nothing written this second, nothing dropped."""
        with self._lock:
            self._second, self._used, self.dropped = -1, 0, 0

    def take(self) -> tuple[bool, int, float]:
        """Return (may write, lines dropped before it, wall time of the first dropped)."""
        now = time.monotonic()
        second = int(now)
        with self._lock:
            if second != self._second:
                self._second, self._used = second, 0
            if self._used >= self.per_second:
                if self.dropped == 0:
                    self._dropped_since = time.time()
                self.dropped += 1
                return False, 0, 0.0
            self._used += 1
            dropped, since = self.dropped, self._dropped_since
            self.dropped = 0
            return True, dropped, since


DENIAL_LINES = LineBudget(LINES_PER_SECOND)
RECEIVER_ERRORS = LineBudget(1)


def report_denial(request: Any, policy: str, identity: str, decision: Decision) -> None:
    """Send ``rate_limited`` and log the denial of ``request`` by ``policy`` (see the module)."""
    if rate_limited.has_listeners():
        _send(request, policy, identity, decision)
    if denials_logger.isEnabledFor(logging.INFO):
        _log(policy, identity, decision)


async def areport_denial(request: Any, policy: str, identity: str, decision: Decision) -> None:
    """:func:`report_denial` on the event loop: ``rate_limited.asend_robust`` where Django
    has it (async receivers awaited on the loop), else ``send_robust`` with the
    coroutines of async receivers awaited."""
    if rate_limited.has_listeners():
        arguments = _arguments(request, policy, identity, decision)
        asend = getattr(rate_limited, "asend_robust", None)
        if asend is not None:
            _receiver_errors(await asend(**arguments))
        else:
            # Django before 5.0 calls an async receiver as a function: its
            # coroutine is awaited here, on the loop, as asend_robust would.
            replies = []
            for receiver, reply in rate_limited.send_robust(**arguments):
                if inspect.iscoroutine(reply):
                    try:
                        reply = await reply
                    except Exception as exc:
                        reply = exc
                replies.append((receiver, reply))
            _receiver_errors(replies)
    if denials_logger.isEnabledFor(logging.INFO):
        _log(policy, identity, decision)


def _arguments(request: Any, policy: str, identity: str, decision: Decision) -> dict[str, Any]:
    return {
        "sender": policy,
        "request": request,
        "policy": policy,
        "identity": identity,
        "decision": decision,
        "shadow": decision.shadow,
    }


def _send(request: Any, policy: str, identity: str, decision: Decision) -> None:
    _receiver_errors(rate_limited.send_robust(**_arguments(request, policy, identity, decision)))


def report_block(request: Any, policy: str, identity: str, seconds: float) -> None:
    """Send ``identity_blocked`` for a block that starts (``send_robust``: receivers' errors
    logged as ``rate_limited``'s), and log it on ``django_rl.denials``."""
    _receiver_errors(
        identity_blocked.send_robust(
            sender=policy, policy=policy, identity=identity, seconds=seconds, request=request
        )
    )
    denials_logger.info(
        "Policy %r blocked %s for %s s", policy, short_repr(identity), f"{seconds:,.3f}"
    )


def _receiver_errors(replies: Any) -> None:
    for receiver, reply in replies:
        if isinstance(reply, Exception):
            may, dropped, _ = RECEIVER_ERRORS.take()
            if may:
                logger.error(
                    "A receiver of django_rl.signals.rate_limited (%s) raised %s; the request "
                    "goes on as if it had not been connected%s.",
                    getattr(receiver, "__qualname__", receiver),
                    type(reply).__name__,
                    f" ({dropped} more such errors not logged)" if dropped else "",
                    exc_info=reply,
                )


def _log(policy: str, identity: str, decision: Decision) -> None:
    may, dropped, since = DENIAL_LINES.take()
    if not may:
        return
    if decision.shadow:
        what = f"Policy {policy!r} (shadow mode) would have denied {short_repr(identity)}"
        tail = "; not enforced"
    else:
        what = f"Policy {policy!r} denied {short_repr(identity)}"
        tail = ""
    if dropped:
        tail += (
            f" ({dropped:,} denial lines left out since "
            f"{time.strftime('%H:%M:%S', time.localtime(since))}: at most "
            f"{LINES_PER_SECOND} a second per process)"
        )
    denials_logger.info(
        "%s: Retry-After %d s%s%s",
        what,
        decision.retry_after_header,
        " (decided without Redis)" if decision.degraded else "",
        tail,
    )
