"""DRF's throttles, decided by django_rl: replace ``rest_framework.throttling.`` with this module.

``SimpleRateThrottle``, ``AnonRateThrottle``, ``UserRateThrottle`` and
``ScopedRateThrottle`` keep DRF's names, class attributes (``scope``,
``rate``, ``THROTTLE_RATES``, ``cache_format``, ``scope_attr``), hooks
(``get_cache_key``, ``get_rate``, ``parse_rate``, ``allow_request``,
``throttle_success``, ``throttle_failure``, ``wait``, ``get_ident``) and
settings (``REST_FRAMEWORK``'s ``DEFAULT_THROTTLE_RATES`` and
``NUM_PROXIES``). What ``get_cache_key`` returns is the identity; each
(scope, rate) is a django_rl policy (``drf_policies.py``) with DRF's own
algorithm, a sliding log, so the answers are DRF's. Unlike DRF's
get-then-set on the cache, each decision is one atomic round trip to Redis:
exact under any concurrency, on the Redis server's clock. The hooks still do
what DRF's do when a subclass calls them itself: ``throttle_success`` records
one request (the one :meth:`SimpleRateThrottle.allow_request` calls claims
the count its decision made), and ``cache`` is DRF's cache API on the
drop-in's logs (``drf_cache.py``).

The rate-limit headers go on the response as for ``PolicyThrottle``;
``FAIL_OPEN`` decides when Redis cannot answer. The differences from DRF,
each on purpose, are listed in docs/migrating.md.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import MutableMapping
from typing import Any, ClassVar

from django.core.exceptions import ImproperlyConfigured
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from django_rl.contrib.drf_policies import POLICIES
from django_rl.contrib.throttle_logs import LoggedThrottle, SettingsRates
from django_rl.contrib.throttle_logs import address_identity as address_identity
from django_rl.core import installed
from django_rl.core.rates import RateError
from django_rl.core.rates import parse_rate as parse_rate_text
from django_rl.core.recording import record
from django_rl.core.switches import LIMITS
from django_rl.policies.exempt import EXEMPTIONS

__all__ = [
    "AnonRateThrottle",
    "BaseThrottle",
    "ScopedRateThrottle",
    "SimpleRateThrottle",
    "ThrottleRateError",
    "UserRateThrottle",
]


class ThrottleRateError(ImproperlyConfigured, ValueError):
    """A throttle rate that does not parse: ``ImproperlyConfigured``, and a ``ValueError``.

    DRF's ``parse_rate`` fails with a ``ValueError`` on a malformed rate;
    code that catches either keeps working.
    """


class DefaultThrottleRates(SettingsRates):
    """``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]`` as it is now, read on each access.

    DRF binds its ``THROTTLE_RATES`` to the dict of the settings at import,
    so ``override_settings`` does not reach it; here every read (and write,
    for ``mock.patch.dict``) goes to the dict of the current settings. A
    subclass's own ``THROTTLE_RATES`` dict replaces this, as in DRF.
    """

    name = "DEFAULT_THROTTLE_RATES"

    def _rates(self) -> Any:
        return api_settings.DEFAULT_THROTTLE_RATES


class SimpleRateThrottle(LoggedThrottle, BaseThrottle):
    """A throttle at ``rate``, or at the rate of ``scope`` in ``THROTTLE_RATES``.

    Subclasses override :meth:`get_cache_key`: the identity a request counts
    as, or ``None`` for a request not throttled. After :meth:`allow_request`,
    ``decision`` holds the Decision (``None`` when nothing was decided),
    ``key`` the cache key and ``now`` the timer's time, as in DRF;
    :attr:`history` and :meth:`wait` answer from the log in Redis
    (``throttle_logs.py``, shared with the Ninja drop-in; ``cache`` is DRF's
    cache API on those logs, ``drf_cache.py``).
    """

    _rl_policies = POLICIES
    THROTTLE_RATES: MutableMapping[str, Any] | dict[str, Any] = DefaultThrottleRates()

    def __init__(self) -> None:
        if not getattr(self, "rate", None):
            self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        """Return the identity ``request`` counts as, or ``None`` to leave it unthrottled.

        :raises NotImplementedError: always, here: subclasses say.
        """
        raise NotImplementedError(".get_cache_key() must be overridden")

    def get_rate(self) -> str | None:
        """Return the rate of ``scope`` in ``THROTTLE_RATES`` (``None``: not throttled).

        :raises ImproperlyConfigured: without ``scope``, or for a scope that
            ``THROTTLE_RATES`` does not name (DRF's messages).
        """
        if not getattr(self, "scope", None):
            raise ImproperlyConfigured(
                f"You must set either `.scope` or `.rate` for '{type(self).__name__}' throttle"
            )
        try:
            rate: str | None = self.THROTTLE_RATES[self.scope]  # type: ignore[index]
        except KeyError:
            raise ImproperlyConfigured(
                f"No default throttle rate set for '{self.scope}' scope"
            ) from None
        return rate

    def parse_rate(self, rate: str | None) -> tuple[int | None, int | None]:
        """Return ``(requests, period in seconds)`` of ``rate``; ``(None, None)`` for ``None``.

        DRF's periods (``s``, ``sec``, ``m``, ``min``, ``h``, ``hour``,
        ``d``, ``day``) and django_rl's (plurals, ``w``, multipliers such as
        ``"100/10m"``, seconds such as ``"100/10"``).

        :raises ThrottleRateError: for a rate that does not parse (an
            ``ImproperlyConfigured`` and a ``ValueError``).
        """
        if rate is None:
            return (None, None)
        try:
            # DRF parses on every request (a throttle per request): cached.
            return _parsed(rate) if isinstance(rate, str) else _parse(rate)
        except RateError as exc:
            raise ThrottleRateError(
                f"Throttle rate {rate!r} of '{type(self).__name__}' (scope {self.scope!r}): {exc}"
            ) from None

    def allow_request(self, request: Any, view: Any) -> bool:
        """Count ``request`` under its cache key and return whether it is allowed.

        Calls :meth:`throttle_success` or :meth:`throttle_failure` and
        returns what they return. ``True`` without counting for a ``None``
        rate or cache key. One round trip to Redis, or none when this
        process already knows the key is denied (the deny cache); one more
        only for a subclass whose ``throttle_success`` does not call this
        class's (its count is taken back, as DRF would not have recorded).
        Overrides of the policy apply to the cache key, and to the ``ip:``
        identity of the address it stands for (:func:`address_identity`).
        """
        if not installed.looked:  # once per process: is "django_rl" in INSTALLED_APPS?
            installed.look()
        if self.rate is None:
            return True
        if LIMITS.off or (EXEMPTIONS.on and EXEMPTIONS.exempts(request)):
            # rate_limits_disabled (core/switches.py), or EXEMPT (policies/exempt.py):
            # no limit applies, no Redis.
            # request.limited False, as the front doors set it (DRF's own tests pass {}).
            with contextlib.suppress(AttributeError):
                record(request, ())
            return True
        key = self.key = self.get_cache_key(request, view)
        if key is None:
            return True
        if type(key) is not str:
            key = str(key)
        # APIView.finalize_response copies view.headers onto the response,
        # allowed or denied (what PolicyThrottle does too). Not through
        # django_rl.throttling: it imports rest_framework.views, whose
        # APIView imports the DEFAULT_THROTTLE_CLASSES, i.e. this module.
        headers = getattr(view, "headers", None) if view is not None else None
        return self.decide_key(request, key, headers if isinstance(headers, dict) else None)


class AnonRateThrottle(SimpleRateThrottle):
    """Throttle anonymous requests by client address (``get_ident``); others are not throttled."""

    scope = "anon"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        if request.user and request.user.is_authenticated:
            return None
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class UserRateThrottle(SimpleRateThrottle):
    """Throttle by user id when authenticated, else by client address (``get_ident``)."""

    scope = "user"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        return self.cache_format % {"scope": self.scope, "ident": _user_or_ident(self, request)}


class ScopedRateThrottle(SimpleRateThrottle):
    """Throttle views by their ``throttle_scope`` at that scope's rate; views without one are not.

    The identity is the user id when authenticated, else the client address.
    """

    scope_attr: ClassVar[str] = "throttle_scope"

    def __init__(self) -> None:
        # The rate is the view's scope's: known only once a view calls.
        pass

    def allow_request(self, request: Any, view: Any) -> bool:
        self.scope = getattr(view, self.scope_attr, None)
        if not self.scope:
            return True
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request, view)

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        return self.cache_format % {"scope": self.scope, "ident": _user_or_ident(self, request)}


def _parse(rate: object) -> tuple[int, int]:
    parsed = parse_rate_text(rate)
    return (parsed.limit, parsed.period_ms // 1000)


_parsed = functools.lru_cache(maxsize=256)(_parse)


def _user_or_ident(throttle: BaseThrottle, request: Any) -> Any:
    if request.user and request.user.is_authenticated:
        return request.user.pk
    return throttle.get_ident(request)
