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
import time
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, ClassVar

from django.core.exceptions import ImproperlyConfigured
from redis.exceptions import RedisError
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from django_rl.algorithms.sliding_log import SlidingLog
from django_rl.backends.given_time import decisions_at
from django_rl.conf import get_settings
from django_rl.contrib.drf_cache import (
    ThrottleLogs,
    ThrottleLogsDescriptor,
    change_log,
    timer_replaced,
)
from django_rl.contrib.drf_policies import policy_for
from django_rl.core import installed
from django_rl.core.decision import Decision
from django_rl.core.identities import _normalize_address
from django_rl.core.rates import RateError
from django_rl.core.rates import parse_rate as parse_rate_text
from django_rl.core.recording import record
from django_rl.core.switches import LIMITS
from django_rl.http.headers import write_headers
from django_rl.observability.denials import report_denial
from django_rl.overrides.loader import rules_for
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


class DefaultThrottleRates(MutableMapping[str, Any]):
    """``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]`` as it is now, read on each access.

    DRF binds its ``THROTTLE_RATES`` to the dict of the settings at import,
    so ``override_settings`` does not reach it; here every read (and write,
    for ``mock.patch.dict``) goes to the dict of the current settings. A
    subclass's own ``THROTTLE_RATES`` dict replaces this, as in DRF.
    """

    @staticmethod
    def _rates() -> Any:
        return api_settings.DEFAULT_THROTTLE_RATES

    def __getitem__(self, scope: str) -> Any:
        return self._rates()[scope]

    def __setitem__(self, scope: str, rate: Any) -> None:
        self._rates()[scope] = rate

    def __delitem__(self, scope: str) -> None:
        del self._rates()[scope]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._rates()))

    def __len__(self) -> int:
        return len(self._rates())

    def copy(self) -> dict[str, Any]:
        """Return the rates now, as a plain dict (``mock.patch.dict`` keeps it to restore)."""
        return dict(self._rates())

    def __repr__(self) -> str:
        return f"<DEFAULT_THROTTLE_RATES {dict(self._rates())!r}>"


class SimpleRateThrottle(BaseThrottle):
    """A throttle at ``rate``, or at the rate of ``scope`` in ``THROTTLE_RATES``.

    Subclasses override :meth:`get_cache_key`: the identity a request counts
    as, or ``None`` for a request not throttled. After :meth:`allow_request`,
    ``decision`` holds the Decision (``None`` when nothing was decided),
    ``key`` the cache key and ``now`` the timer's time, as in DRF;
    :attr:`history` and :meth:`wait` answer from the log in Redis.
    """

    #: DRF's cache, as a subclass that reads DRF's history itself uses it
    #: (``self.cache.get(self.key, [])``, ``self.cache.set(...)``): on an
    #: instance, the drop-in's logs in Redis at this throttle's scope and
    #: rate (:class:`ThrottleLogs`), so it sees what the drop-in counted.
    cache: Any = ThrottleLogsDescriptor()
    #: DRF's clock. Left as ``time.time``, decisions take the Redis server's
    #: time; replaced (a test moving time on, as DRF's tests do), the time it
    #: gives, in seconds since the epoch (``now`` is then set, as in DRF).
    timer: ClassVar[Callable[[], float]] = time.time
    cache_format: ClassVar[str] = "throttle_%(scope)s_%(ident)s"
    scope: str | None = None
    THROTTLE_RATES: MutableMapping[str, Any] | dict[str, Any] = DefaultThrottleRates()
    rate: str | None
    num_requests: int | None
    duration: int | None
    decision: Decision | None = None
    key: str | None = None
    now: float | None = None
    #: The history read since the decision (or set by hand; ``None``:
    #: neither) and the time it was read at (``None``: set by hand).
    _history: list[float] | None = None
    _read_at: float | None = None
    #: :meth:`allow_request` allowed this request (its decision counted it,
    #: or Redis could not) and no :meth:`throttle_success` has claimed that
    #: count yet.
    _unclaimed: bool = False

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
        num_requests, duration = self.num_requests, self.duration
        if num_requests is None or duration is None:  # set by hand to None: DRF would fail
            return True
        policy = policy_for(self.scope, num_requests, duration)
        timer: Callable[[], float] = self.timer  # type: ignore[misc]  # an instance's, bound or not
        now = self.now = timer()
        # Only a policy with overrides needs the address the cache key stands for.
        rules = rules_for(policy.name)
        also = None if rules is None else address_identity(self, request, key)
        if timer is time.time or not timer_replaced(timer):
            decision = policy.hit(key, also=also)
        else:
            # ``timer`` replaced (as DRF's own tests and many projects' do to
            # move time on): decided at the time it gives (backends/given_time.py).
            with decisions_at(int(now * 1000)):
                decision = policy.hit(key, also=also)
        self.decision, self._history, self._read_at = decision, None, None
        # A shadow policy (its mode, or SHADOW) refuses nothing: its denial
        # is reported (shadow=True) and the request goes on, as at the front doors.
        allowed = not decision.denies
        if not decision.allowed:
            # The rate_limited signal and the denial log, as for the front doors.
            report_denial(request, policy.name, key, decision)
        try:
            # request.django_rl_decisions and request.limited, as both front doors set them.
            every = record(request, (decision,))
        except AttributeError:  # not a request (DRF's own tests pass {}): nothing to record
            every = [decision]
        # APIView.finalize_response copies view.headers onto the response,
        # allowed or denied (what PolicyThrottle does too). Not through
        # django_rl.throttling: it imports rest_framework.views, whose
        # APIView imports the DEFAULT_THROTTLE_CLASSES, i.e. this module.
        if view is not None:
            headers = getattr(view, "headers", None)
            if isinstance(headers, dict):
                write_headers(headers, every)
        if not allowed:
            return self.throttle_failure()
        # The decision counted the request (or could not, Redis unable to
        # answer): the throttle_success called next claims that count instead
        # of making another (DRF's records the request there).
        self._unclaimed = True
        try:
            success = self.throttle_success()
        finally:
            if self._unclaimed:
                # An override that did not call ours (or raised first): DRF
                # would have recorded nothing, so the count is taken back
                # (never over the limit meanwhile: it was counted first).
                self._unclaimed = False
                # (Not an exemption's, a rate override's or a degraded one.)
                ours = decision.limit == num_requests and decision.window == duration
                # A shadow denial counted nothing: nothing to take back.
                if ours and decision.allowed and not decision.degraded:
                    change_log(self, policy, key, "take", now=now)
        return success

    def throttle_success(self) -> bool:
        """Record this request, as DRF's does, and return ``True``.

        Each call counts exactly one request under :attr:`key`, but the one
        that claims the count :meth:`allow_request`'s decision already made
        (same round trip as the decision). Called by a subclass that decided
        itself (DRF's ``allow_request`` body, or a throttle that counts only
        failed logins), it counts one in Redis, whatever the limit, at
        :attr:`now` (the Redis server's time while ``timer`` is
        ``time.time``): one round trip. As in DRF, :attr:`now` goes first in
        :attr:`history`.
        """
        if self._unclaimed:
            self._unclaimed = False
            return True
        if self.now is None:
            self.now = self.timer()  # type: ignore[misc]  # an instance's, bound or not
        cache = self.cache
        if not isinstance(cache, ThrottleLogs):
            # A subclass's own cache (``cache = caches["..."]``), which its own
            # allow_request reads: DRF's write, there.
            history = self.history
            history.insert(0, self.now)
            cache.set(self.key, history, self.duration)
            return True
        if self._history is not None:
            self._history.insert(0, self.now)
        if self.key is not None and self.num_requests is not None and self.duration is not None:
            policy = policy_for(self.scope, self.num_requests, self.duration)
            change_log(self, policy, str(self.key), "add", now=self.now)
        return True

    def throttle_failure(self) -> bool:
        """Return ``False``, as DRF's: a denied request is not recorded."""
        return False

    def wait(self) -> float | None:
        """Return the seconds to wait before the next request, as DRF's ``wait()``.

        DRF's arithmetic on :attr:`history`: the time before the oldest
        request in the window leaves it, spread over the requests left plus
        one; ``None`` when none is left. After a denial that is the time until
        the request would be allowed, as Redis answered it (no round trip);
        after an allowed request the log is read from Redis (one round trip,
        the first time). Redis unable to answer: the pace of an empty window.
        """
        decision = self.decision
        if decision is None or (self._history is not None and self._read_at is None):
            return self._pace(self.history, self.now)  # set by hand (DRF's tests)
        if not decision.allowed:
            # DRF's arithmetic, which for a denial is the time until the hit
            # fits: what Redis answered, without asking again.
            return decision.retry_after
        history = self.history  # one round trip to read the log, the first time
        return self._pace(history, self._read_at)

    @property
    def history(self) -> list[float]:
        """The times (seconds, newest first) of the requests the window holds, as DRF keeps them.

        Read from Redis when first asked after :meth:`allow_request` (one
        round trip; what is counted by then), ``[]`` if nothing was decided
        or Redis cannot answer. Set by hand (DRF's tests do), what was set,
        until the next decision.
        """
        if self._history is None:
            log = self._read_log() if self.decision is not None else None
            if log is None:
                self._read_at, self._history = self.now, []
            else:
                self._read_at, self._history = log
        return self._history

    @history.setter
    def history(self, value: list[float]) -> None:
        self._read_at, self._history = None, value

    def _read_log(self) -> tuple[float, list[float]] | None:
        """Return (the time read at, :attr:`history`) from Redis; ``None`` if it cannot say.

        The times of the sliding log's entries (one per allowed request) on
        the decisions' clock: the Redis server's, or a replaced ``timer``'s.
        """
        key, decision = self.key, self.decision
        if key is None or decision is None or decision.degraded:
            return None
        assert self.num_requests is not None and self.duration is not None  # decided
        policy = policy_for(self.scope, self.num_requests, self.duration)  # the deciding one
        replaced = timer_replaced(self.timer)  # type: ignore[misc]  # an instance's, bound or not
        given = int(self.now * 1000) if replaced and self.now is not None else None
        log = policy.algorithm
        if not isinstance(log, SlidingLog):
            return None  # "0/<period>": no log, nothing ever counted
        try:
            now, times = policy.backend.run(policy.key(str(key)), log.times, given)
        except RedisError:
            return None  # the node logged its outage once, as for a decision
        return now / 1000, [t / 1000 for t in times]

    def _pace(self, history: list[float], now: float | None) -> float | None:
        """Return DRF's wait: the time until the oldest request leaves the window, per request left.

        ``None`` when no request is left.
        """
        if not self.duration or self.num_requests is None:
            return None
        left = float(self.duration)
        if history and now is not None:
            left -= now - history[-1]
        available = self.num_requests - len(history) + 1
        return left / available if available > 0 else None


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


def address_identity(throttle: SimpleRateThrottle, request: Any, key: str) -> str | None:
    """Return the ``ip:`` identity of the address ``key`` counts, or ``None`` if it counts none.

    That is when ``key`` is the throttle's ``cache_format`` of its scope and
    the request's ``get_ident`` (what ``AnonRateThrottle`` returns, and
    ``UserRateThrottle``'s and ``ScopedRateThrottle``'s for an anonymous
    request), and that is an address: grouped as the ``ip`` key groups
    addresses (``IPV4_PREFIX``, ``IPV6_PREFIX``), so an override of an
    address (stored as ``ip:<address>``) or of a network applies to it.
    """
    try:
        ident = throttle.get_ident(request)
        if ident is None or key != throttle.cache_format % {
            "scope": throttle.scope,
            "ident": ident,
        }:
            return None
    except Exception:  # a subclass's hooks, or not a request (DRF's tests pass {})
        return None
    settings = get_settings()
    address = _normalize_address(str(ident), settings.ipv4_prefix, settings.ipv6_prefix)
    return None if address is None else f"ip:{address}"


def _parse(rate: object) -> tuple[int, int]:
    parsed = parse_rate_text(rate)
    return (parsed.limit, parsed.period_ms // 1000)


_parsed = functools.lru_cache(maxsize=256)(_parse)


def _user_or_ident(throttle: BaseThrottle, request: Any) -> Any:
    if request.user and request.user.is_authenticated:
        return request.user.pk
    return throttle.get_ident(request)
