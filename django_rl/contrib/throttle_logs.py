"""What DRF's and Django Ninja's ``SimpleRateThrottle`` share, decided by django_rl.

Both keep a history of a client's requests (newest first) under a cache key,
read it, decide in Python and write it back. The drop-ins
(``contrib/drf.py``, ``contrib/ninja.py``) keep their framework's
signatures (DRF's hooks take ``(request, view)``, Ninja's ``(request)``) and
mix in :class:`LoggedThrottle`, which decides a cache key by one policy hit
(a sliding log per scope and rate, ``throttle_policies.py``: one atomic
round trip) and answers the hooks and attributes from that log:
``throttle_success``, ``throttle_failure``, ``wait``, ``history``, ``cache``
(``drf_cache.py``), ``timer``, ``now``, ``key``. Imports no framework.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, ClassVar

from redis.exceptions import RedisError

from django_rl.algorithms.sliding_log import SlidingLog
from django_rl.backends.given_time import decisions_at
from django_rl.conf import get_settings
from django_rl.contrib.drf_cache import ThrottleLogs, ThrottleLogsDescriptor, change_log
from django_rl.contrib.drf_cache import timer_replaced as timer_replaced
from django_rl.contrib.throttle_policies import ThrottlePolicies
from django_rl.core.addresses import normalize_address
from django_rl.core.decision import Decision
from django_rl.core.recording import record
from django_rl.http.headers import write_headers
from django_rl.observability.denials import report_denial
from django_rl.overrides.loader import rules_for


class LoggedThrottle:
    """A throttle whose history is its policy's sliding log in Redis.

    After :meth:`decide_key`, ``decision`` holds the Decision (``None`` when
    nothing was decided), ``key`` the cache key and ``now`` the timer's time;
    :attr:`history` and :meth:`wait` answer from the log in Redis.
    """

    #: The drop-in's policies (one per scope and rate).
    _rl_policies: ClassVar[ThrottlePolicies]
    #: The framework's cache, as a subclass that reads the history itself uses
    #: it (``self.cache.get(self.key, [])``, ``self.cache.set(...)``): on an
    #: instance, the drop-in's logs in Redis at this throttle's scope and
    #: rate (:class:`ThrottleLogs`), so it sees what the drop-in counted.
    cache: Any = ThrottleLogsDescriptor()
    #: The framework's clock. Left as ``time.time``, decisions take the Redis
    #: server's time; replaced (a test moving time on, as DRF's and Ninja's
    #: tests do), the time it gives, in seconds since the epoch.
    timer: ClassVar[Callable[[], float]] = time.time
    cache_format: ClassVar[str] = "throttle_%(scope)s_%(ident)s"
    scope: str | None = None
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
    #: The decision allowed this request (it counted it, or Redis could not)
    #: and no :meth:`throttle_success` has claimed that count yet.
    _unclaimed: bool = False

    def decide_key(self, request: Any, key: str, headers: dict[str, str] | None) -> bool:
        """Count ``request`` under ``key``; call and return ``throttle_success``/``_failure``.

        One round trip to Redis, or none when this process already knows the
        key is denied (the deny cache); one more only for a subclass whose
        ``throttle_success`` does not call this class's (its count is taken
        back, as the framework would not have recorded). The Decision is
        recorded on the request (``core/recording.record``) and its headers
        written into ``headers`` (DRF's ``view.headers``), when given.
        """
        num_requests, duration = self.num_requests, self.duration
        if num_requests is None or duration is None:  # set by hand to None
            return True
        policy = self._rl_policies.policy_for(self.scope, num_requests, duration)
        timer: Callable[[], float] = self.timer  # type: ignore[misc]  # an instance's, bound or not
        now = self.now = timer()
        # Only a policy with overrides needs the address the cache key stands for.
        rules = rules_for(policy.name)
        also = None if rules is None else address_identity(self, request, key)
        if timer is time.time or not timer_replaced(timer):
            decision = policy.hit(key, also=also)
        else:
            # ``timer`` replaced (as DRF's and Ninja's own tests and many
            # projects' do to move time on): decided at the time it gives.
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
            # request.django_rl_decisions and request.limited, as the front doors set them.
            every = record(request, (decision,))
        except AttributeError:  # not a request (DRF's own tests pass {}): nothing to record
            every = [decision]
        if headers is not None:
            write_headers(headers, every)
        if not allowed:
            return bool(self.throttle_failure())
        # The decision counted the request (or could not, Redis unable to
        # answer): the throttle_success called next claims that count instead
        # of making another (the frameworks record the request there).
        self._unclaimed = True
        try:
            success = bool(self.throttle_success())
        finally:
            if self._unclaimed:
                # An override that did not call ours (or raised first): the
                # framework would have recorded nothing, so the count is taken
                # back (never over the limit meanwhile: it was counted first).
                self._unclaimed = False
                # (Not an exemption's, a rate override's or a degraded one.)
                ours = decision.limit == num_requests and decision.window == duration
                # A shadow denial counted nothing: nothing to take back.
                if ours and decision.allowed and not decision.degraded:
                    change_log(self, policy, key, "take", now=now)
        return success

    def throttle_success(self) -> bool:
        """Record this request, as the framework's does, and return ``True``.

        Each call counts exactly one request under :attr:`key`, but the one
        that claims the count :meth:`decide_key`'s decision already made
        (same round trip as the decision). Called by a subclass that decided
        itself (the framework's ``allow_request`` body, or a throttle that
        counts only failed logins), it counts one in Redis, whatever the
        limit, at :attr:`now` (the Redis server's time while ``timer`` is
        ``time.time``): one round trip. As in the frameworks, :attr:`now`
        goes first in :attr:`history`.
        """
        if self._unclaimed:
            self._unclaimed = False
            return True
        if self.now is None:
            self.now = self.timer()  # type: ignore[misc]  # an instance's, bound or not
        cache = self.cache
        if not isinstance(cache, ThrottleLogs):
            # A subclass's own cache (``cache = caches["..."]``), which its own
            # allow_request reads: the framework's write, there.
            history = self.history
            history.insert(0, self.now)
            cache.set(self.key, history, self.duration)
            return True
        if self._history is not None:
            self._history.insert(0, self.now)
        if self.key is not None and self.num_requests is not None and self.duration is not None:
            policy = self._rl_policies.policy_for(self.scope, self.num_requests, self.duration)
            change_log(self, policy, str(self.key), "add", now=self.now)
        return True

    def throttle_failure(self) -> bool:
        """Return ``False``, as the frameworks': a denied request is not recorded."""
        return False

    def wait(self) -> float | None:
        """Return the seconds to wait before the next request, as the frameworks' ``wait()``.

        Their arithmetic on :attr:`history`: the time before the oldest
        request in the window leaves it, spread over the requests left plus
        one; ``None`` when none is left. After a denial that is the time until
        the request would be allowed, as Redis answered it (no round trip);
        after an allowed request the log is read from Redis (one round trip,
        the first time). Redis unable to answer: the pace of an empty window.
        """
        decision = self.decision
        if decision is None or (self._history is not None and self._read_at is None):
            return self._pace(self.history, self.now)  # set by hand (the frameworks' tests)
        if not decision.allowed:
            # The frameworks' arithmetic, which for a denial is the time until
            # the hit fits: what Redis answered, without asking again.
            return decision.retry_after
        history = self.history  # one round trip to read the log, the first time
        return self._pace(history, self._read_at)

    @property
    def history(self) -> list[float]:
        """The times (seconds, newest first) of the requests the window holds.

        Read from Redis when first asked after a decision (one round trip;
        what is counted by then), ``[]`` if nothing was decided or Redis
        cannot answer. Set by hand (the frameworks' tests do), what was set,
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
        policy = self._rl_policies.policy_for(self.scope, self.num_requests, self.duration)
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
        """Return the frameworks' wait: the time until the oldest request leaves, per one left.

        ``None`` when no request is left.
        """
        if not self.duration or self.num_requests is None:
            return None
        left = float(self.duration)
        if history and now is not None:
            left -= now - history[-1]
        available = self.num_requests - len(history) + 1
        return left / available if available > 0 else None


class SettingsRates(MutableMapping[str, Any]):
    """A framework's default throttle rates as its settings hold them now, read on each access.

    DRF and Ninja bind their ``THROTTLE_RATES`` to the dict of the settings
    at import, so ``override_settings`` does not reach it; here every read
    (and write, for ``mock.patch.dict``) goes to the dict of the current
    settings (:meth:`_rates`). A subclass's own ``THROTTLE_RATES`` dict
    replaces this, as in the frameworks.
    """

    #: The setting, as the repr names it.
    name = "THROTTLE_RATES"

    def _rates(self) -> Any:
        raise NotImplementedError

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
        return f"<{self.name} {dict(self._rates())!r}>"


def address_identity(throttle: Any, request: Any, key: str) -> str | None:
    """Return the ``ip:`` identity of the address ``key`` counts, or ``None`` if it counts none.

    That is when ``key`` is the throttle's ``cache_format`` of its scope and
    the request's ``get_ident`` (what ``AnonRateThrottle`` returns, and the
    others' for an anonymous request), and that is an address: grouped as the
    ``ip`` key groups addresses (``IPV4_PREFIX``, ``IPV6_PREFIX``), so an
    override of an address (stored as ``ip:<address>``) or of a network
    applies to it.
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
    address = normalize_address(str(ident), settings.ipv4_prefix, settings.ipv6_prefix)
    return None if address is None else f"ip:{address}"


__all__ = ["LoggedThrottle", "SettingsRates", "address_identity"]
