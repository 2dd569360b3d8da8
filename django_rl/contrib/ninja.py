"""Django Ninja's throttles, decided by django_rl: replace ``ninja.throttling`` with this module.

``BaseThrottle``, ``SimpleRateThrottle``, ``AnonRateThrottle``,
``AuthRateThrottle`` and ``UserRateThrottle`` keep Ninja's names, base class
(each is a ``ninja.throttling.BaseThrottle``, which Ninja's ``NinjaAPI``,
routers and operations require), constructor (``AnonRateThrottle("10/m")``;
without a rate, the rate of ``scope`` in ``NINJA_DEFAULT_THROTTLE_RATES``),
attributes (``scope``, ``rate``, ``num_requests``, ``duration``,
``THROTTLE_RATES``, ``cache_format``, ``timer``, ``cache``, ``history``,
``now``, ``key``), hooks (``get_cache_key``, ``get_rate``, ``parse_rate``,
``allow_request``, ``throttle_success``, ``throttle_failure``, ``wait``,
``get_ident``) and settings (``NINJA_DEFAULT_THROTTLE_RATES``,
``NINJA_NUM_PROXIES``). What ``get_cache_key`` returns is the identity; each
(scope, rate) is a django_rl policy, ``ninja.<scope>`` (``ninja_policies.py``),
with Ninja's own algorithm, a sliding log, so the answers are Ninja's. Unlike
Ninja's get-then-set on the cache, each decision is one atomic round trip to
Redis: exact under any concurrency, on the Redis server's clock.

Ninja calls ``allow_request`` synchronously, for async operations too: the
decision is the sync path's. Each Decision is recorded on the request
(``core/recording.record``), so ``RateLimitMiddleware`` writes the
rate-limit headers on Ninja's answers, its 429s included; after a denial
``wait()`` is the Decision's ``retry_after``, never ``None``, so Ninja's 429
always carries ``Retry-After``. The differences from Ninja are listed in
docs/migrating.md.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, ClassVar

from django.core.exceptions import ImproperlyConfigured
from ninja import throttling as ninja_throttling

from django_rl.contrib.ninja_policies import POLICIES
from django_rl.contrib.throttle_logs import LoggedThrottle, SettingsRates
from django_rl.core import installed
from django_rl.core.rates import RateError, parse_rate
from django_rl.core.recording import record
from django_rl.core.switches import LIMITS
from django_rl.policies.exempt import EXEMPTIONS

__all__ = [
    "AnonRateThrottle",
    "AuthRateThrottle",
    "BaseThrottle",
    "SimpleRateThrottle",
    "UserRateThrottle",
]


class BaseThrottle(ninja_throttling.BaseThrottle):
    """Ninja's ``BaseThrottle``: ``allow_request`` to override, ``get_ident``, ``wait``."""


class NinjaThrottleRates(SettingsRates):
    """``NINJA_DEFAULT_THROTTLE_RATES`` as Ninja's settings hold it now, read on each access.

    Ninja binds ``THROTTLE_RATES`` to its settings' dict at import, so a later
    ``override_settings(NINJA_DEFAULT_THROTTLE_RATES=...)`` does not reach it;
    here it does.
    """

    name = "NINJA_DEFAULT_THROTTLE_RATES"

    def _rates(self) -> Any:
        from ninja.conf import settings

        return settings.DEFAULT_THROTTLE_RATES


class PerThread:
    """An attribute of a throttle that each thread has its own value of.

    Ninja makes one throttle per operation and calls it from every thread
    that serves the API (and, synchronously, from the event loop): what one
    request's ``allow_request`` leaves for its ``wait()`` and its hooks
    (``decision``, ``key``, ``now``, ``history``) must not be another's.
    """

    def __init__(self, default: Any) -> None:
        self.default = default
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, throttle: Any, owner: Any = None) -> Any:
        if throttle is None:
            return self
        return getattr(_local(throttle), self.name, self.default)

    def __set__(self, throttle: Any, value: Any) -> None:
        setattr(_local(throttle), self.name, value)


def _local(throttle: Any) -> threading.local:
    # dict.setdefault is atomic: two threads meeting a new throttle share one.
    local: threading.local = throttle.__dict__.setdefault("_rl_local", threading.local())
    return local


class SimpleRateThrottle(LoggedThrottle, BaseThrottle):
    """A throttle at ``rate``, or at the rate of ``scope`` in ``THROTTLE_RATES``.

    Subclasses override :meth:`get_cache_key`: the identity a request counts
    as, or ``None`` for a request not throttled. After :meth:`allow_request`,
    ``decision`` holds the Decision (``None`` when nothing was decided),
    ``key`` the cache key and ``now`` the timer's time, as in Ninja;
    :attr:`history` and :meth:`wait` answer from the log in Redis
    (``throttle_logs.py``, shared with the DRF drop-in).
    """

    _rl_policies = POLICIES
    THROTTLE_RATES: Any = NinjaThrottleRates()
    _PERIODS: ClassVar[dict[str, int]] = dict(ninja_throttling.SimpleRateThrottle._PERIODS)
    # One request's state, per thread (PerThread): Ninja shares the throttle.
    decision = PerThread(None)
    key = PerThread(None)
    now = PerThread(None)
    _history = PerThread(None)
    _read_at = PerThread(None)
    _unclaimed = PerThread(False)

    def __init__(self, rate: str | None = None) -> None:
        self.rate = rate if rate else self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)

    def get_cache_key(self, request: Any) -> str | None:
        """Return the identity ``request`` counts as, or ``None`` to leave it unthrottled.

        :raises NotImplementedError: always, here: subclasses say.
        """
        raise NotImplementedError(".get_cache_key() must be overridden")

    def get_rate(self) -> str | None:
        """Return the rate of ``scope`` in ``THROTTLE_RATES`` (``None``: not throttled).

        :raises ImproperlyConfigured: without ``scope``, or for a scope that
            ``THROTTLE_RATES`` does not name (Ninja's messages).
        """
        if not getattr(self, "scope", None):
            raise ImproperlyConfigured(
                f"You must set either `.scope` or `.rate` for '{type(self).__name__}' throttle"
            )
        try:
            rate: str | None = self.THROTTLE_RATES[self.scope]
        except KeyError:
            raise ImproperlyConfigured(
                f"No default throttle rate set for '{self.scope}' scope"
            ) from None
        return rate

    def parse_rate(self, rate: str | None) -> tuple[int | None, int | None]:
        """Return ``(requests, period in seconds)`` of ``rate``; ``(None, None)`` for ``None``.

        Ninja's forms (``"5/m"``, ``"500/10min"``, ``"100/10"`` seconds,
        ``"10_000/7d"``), within what a policy takes: 0 (deny all) to a
        billion requests, a period of 1 second to 366 days.

        :raises ValueError: for a rate that does not parse, or out of range
            (Ninja's ``"Invalid rate format: ..."``).
        """
        if rate is None:
            return (None, None)
        if not isinstance(rate, str):
            raise ValueError(f"Invalid rate format: {rate!r}")
        count, period = ninja_throttling.SimpleRateThrottle.parse_rate(self, rate)  # type: ignore[arg-type]
        assert count is not None and period is not None  # (a rate was given)
        try:
            parse_rate(f"{count}/{period}")  # django_rl's limits of a rate
        except RateError as exc:
            raise ValueError(f"Invalid rate format: {rate} ({exc})") from None
        return count, period

    def allow_request(self, request: Any) -> bool:
        """Count ``request`` under its cache key and return whether it is allowed.

        Calls :meth:`throttle_success` or :meth:`throttle_failure` and
        returns what they return. ``True`` without counting for a ``None``
        rate or cache key. One round trip to Redis, or none when this
        process already knows the key is denied (the deny cache).
        """
        if not installed.looked:  # once per process: is "django_rl" in INSTALLED_APPS?
            installed.look()
        if self.rate is None:
            return True
        if LIMITS.off or (EXEMPTIONS.on and EXEMPTIONS.exempts(request)):
            # rate_limits_disabled (core/switches.py), or EXEMPT (policies/exempt.py).
            with contextlib.suppress(AttributeError):
                record(request, ())
            return True
        key = self.key = self.get_cache_key(request)
        if key is None:
            return True
        if type(key) is not str:
            key = str(key)
        return self.decide_key(request, key, None)


class AnonRateThrottle(SimpleRateThrottle):
    """Throttle requests without ``request.auth`` by client address; others are not throttled."""

    scope = "anon"
    get_cache_key = ninja_throttling.AnonRateThrottle.get_cache_key


class AuthRateThrottle(SimpleRateThrottle):
    """Throttle by a digest of ``str(request.auth)``, else by client address."""

    scope = "auth"
    get_cache_key = ninja_throttling.AuthRateThrottle.get_cache_key


class UserRateThrottle(SimpleRateThrottle):
    """Throttle by user id when authenticated, else by client address."""

    scope = "user"
    get_cache_key = ninja_throttling.UserRateThrottle.get_cache_key
