"""A shadow policy's errors: logged, and the policy left out of that request only.

A policy in shadow mode (``"mode": "shadow"``, or ``SHADOW: True``) never
changes a response. So when deciding it raises for a request (its key or rate
callable raised or returned junk, its cost does not fit a rate chosen per
request, ...), the front doors (``engine.py``) leave that policy out of that
request: no Decision of it, no headers, nothing counted for it; the request's
other policies are decided as if it were not there, and the next request
tries it again.

Each such error is logged at WARNING on logger ``django_rl``, with its
traceback: once per policy and cause (the exception's class) in each
:data:`INTERVAL`, however many requests meet it, each line saying how many
errors of that cause it stood for since the last one (the house style of
``observability/history.Refusals``: a broken callable on a busy view must not
log every request).
"""

from __future__ import annotations

import logging
import threading
import time

logger = logging.getLogger("django_rl")

#: Seconds between two lines of one policy and cause.
INTERVAL = 600.0
#: The most (policy, cause) pairs remembered; beyond, all are forgotten (and
#: each logs again once): bounded memory whatever the exceptions raised.
MAX_CAUSES = 1024


class ShadowErrors:
    """Logs, at most once per :attr:`interval` per policy and cause, a shadow policy's errors.

    Thread-safe. :meth:`failed` never raises (it runs inside a request).
    """

    def __init__(self, interval: float = INTERVAL) -> None:
        self.interval = interval
        # (policy, cause) -> [time of its last line, errors since that line].
        self._seen: dict[tuple[str, str], list[float]] = {}
        self._lock = threading.Lock()

    def failed(self, policy: str, exc: BaseException) -> None:
        """Note that deciding shadow policy ``policy`` raised ``exc``; log it if due."""
        cause = f"{type(exc).__module__}.{type(exc).__qualname__}"
        now = time.monotonic()
        with self._lock:
            seen = self._seen.get((policy, cause))
            if seen is not None and now - seen[0] < self.interval:
                seen[1] += 1
                return
            errors = 1 if seen is None else int(seen[1]) + 1
            if seen is None and len(self._seen) >= MAX_CAUSES:
                self._seen.clear()
            self._seen[(policy, cause)] = [now, 0]
        logger.warning(
            "Rate-limit policy %r (shadow mode) raised %s while deciding a request: %s. "
            "It is left out of such requests (a shadow policy never changes a response); "
            "the other policies decide them as usual. %d such error(s) since this was last "
            "logged; logged at most once every %g s per policy and cause.",
            policy,
            cause,
            _brief(exc),
            errors,
            self.interval,
            exc_info=exc,
        )

    def reset(self) -> None:
        """Forget the lines logged (for tests)."""
        with self._lock:
            self._seen.clear()


def _brief(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # a broken __str__ must not break the request either
        return "(its message cannot be read)"
    return text if len(text) <= 300 else text[:297] + "..."


#: The process's log of shadow policies' errors.
SHADOW_ERRORS = ShadowErrors()
