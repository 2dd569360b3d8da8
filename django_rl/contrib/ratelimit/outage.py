"""The drop-in's warning while calls cannot be counted: what ``RATELIMIT_FAIL_OPEN`` then does.

django-ratelimit's default, kept by the drop-in, is ``RATELIMIT_FAIL_OPEN =
False``: while Redis (or the cache) cannot count, every call with
``increment=True`` is limited, so ``@ratelimit`` views answer 403 to
everyone, where django_rl's own policies fail open by default. The
backend's outage line names ``DJANGO_RL``'s ``FAIL_OPEN``, which the drop-in
does not follow; this names the setting that decides.

One WARNING on logger ``django_rl`` when calls start failing, not one per
call: the next counted call that Redis answers ends the run, and the first
failure after it warns again; so does the first failure in another cache
(``RATELIMIT_USE_CACHE`` changed) or after ``CACHES`` changed (new servers).
"""

from __future__ import annotations

import logging
import threading

from django_rl.conf import forget_on_change

logger = logging.getLogger("django_rl")

#: The alias of the cache whose last counted call could not be counted (a
#: run is under way, its warning logged), or ``None``. Read on every
#: answered call: a module global.
failing: str | None = None
_lock = threading.Lock()


def unanswered(alias: str, fail_open: bool) -> None:
    """Note a counted call that could not be counted; warn if it starts a run of them."""
    global failing
    if failing == alias:
        return
    with _lock:
        if failing == alias:
            return
        failing = alias
    if fail_open:
        logger.warning(
            "The django-ratelimit drop-in cannot count calls in CACHES[%r] "
            "(RATELIMIT_USE_CACHE): every @ratelimit call is let through uncounted "
            "until it answers again, as RATELIMIT_FAIL_OPEN is True.",
            alias,
        )
        return
    logger.warning(
        "The django-ratelimit drop-in cannot count calls in CACHES[%r] "
        "(RATELIMIT_USE_CACHE): every @ratelimit call is limited (403 with the "
        "default Ratelimited) until it answers again, as RATELIMIT_FAIL_OPEN is False "
        "(django-ratelimit's default, kept by the drop-in; django_rl's own policies "
        "fail open). Set RATELIMIT_FAIL_OPEN = True to let calls through while it "
        "cannot count.",
        alias,
    )


def answered() -> None:
    """Note a counted call that was counted: a run of failures, if any, has ended."""
    global failing
    failing = None


forget_on_change(answered, "CACHES", "RATELIMIT_USE_CACHE")
