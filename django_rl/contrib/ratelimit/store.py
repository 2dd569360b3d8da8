"""Where the drop-in's counts live: a django_rl policy per (group, methods).

**Counting.** Every call with ``increment=True`` is counted, denied ones
included, and the count is returned as it stands (it can pass the limit):
django-ratelimit's semantics, which ``get_usage`` exposes. The count is a
``fixed_window`` counter (``algorithms/fixed_window.py``): one MULTI/EXEC
per decision (INCRBY, PEXPIREAT NX, PTTL), so concurrent calls are counted
exactly, where the original's ``cache.add`` then ``cache.incr`` takes two
round trips. The transaction is run without a limit (at
:data:`~django_rl.core.rates.MAX_COUNT`), so its reply is the count itself; the
caller compares it with the limit. No deny cache: a denied call must reach
Redis to be counted.

**Windows** are aligned on the Redis server's clock (every key's window of
one period ends at the same time), unlike the original's, staggered per key
value; see docs/migrating.md.

**State like any policy's.** A group's policy is named as an inline
policy of that group (``@group``, ``inline.policy_name``); its keys'
fingerprint holds the rate and the methods, so each rate and each set of
methods keeps its own count, as the original's cache keys do. Each rate is
a variant of the policy, recorded in the rate catalogue (``plans.py``) like
a per-plan policy's, so the admin's live counters and ``manage.py
ratelimit`` of any process show and reset this state (see
:func:`known_policies`).
"""

from __future__ import annotations

import functools
import math
import threading
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import InvalidCacheBackendError
from redis.exceptions import RedisError

from django_rl.algorithms import ParameterError
from django_rl.algorithms.base import read_now
from django_rl.algorithms.fixed_window import FixedWindow
from django_rl.backends import RedisNode, get_backend
from django_rl.conf import forget_on_change, get_settings
from django_rl.contrib.ratelimit import conf, django_cache
from django_rl.contrib.ratelimit.discovery import url_groups
from django_rl.core.rates import MAX_COUNT, Rate, RateError, parse_rate
from django_rl.observability.metrics import metrics
from django_rl.overrides.loader import rules_for
from django_rl.overrides.rules import BLOCK, EXEMPT, Rule
from django_rl.policies.inline import policy_name
from django_rl.policies.plans import PlanRates, Variant, make_variant
from django_rl.policies.registry import Policy

#: What joins the keys' fingerprint of the drop-in's policies, with the methods.
TAG = "django-ratelimit"


@dataclass(frozen=True)
class Usage:
    """A key's count in its window, the seconds left in it (rounded up), and its limit.

    :ivar override: the action of an override set in the admin (``overrides/``)
        that decided instead of the count: ``"exempt"`` (no limit applies) or
        ``"block"`` (limited until it expires, ``time_left``; ``count`` 0);
        ``""`` when none did. A rate override changes ``limit`` and the window.
    """

    count: int
    time_left: int
    limit: int
    override: str = ""


def _no_rate_function(request: Any) -> object:
    raise TypeError("the django-ratelimit drop-in picks its policies' rates itself")


def _build_policy(group: str, methods: str, alias: str, prefix: str) -> Policy:
    name = policy_name(group)
    extra = f"{TAG} methods {methods or 'ALL'}"

    def build(text: str) -> Variant:
        # FixedWindow even at "0/<period>" (no static algorithm): the
        # original counts those calls too, and get_usage reports them.
        return make_variant(
            FixedWindow(parse_rate(text)), text, prefix=prefix, name=name, extra=extra
        )

    return Policy(
        name,
        None,
        lambda request: None,  # the drop-in identifies requests by its keys
        get_backend(alias),
        key_prefix=prefix,
        # Unused by the drop-in's calls: get_usage follows RATELIMIT_FAIL_OPEN.
        fail_open=False,
        denials=None,  # every call is counted, denied ones too
        rates=PlanRates(_no_rate_function, f"the rate of {TAG}'s @ratelimit", build),
        extra=extra,
        build=build,
    )


_policies: dict[tuple[str, str, str, str], Policy] = {}
_lock = threading.Lock()


def policy_for(group: str, methods: str, alias: str | None = None) -> Policy:
    """Return the policy of ``group`` for ``methods`` counted in the cache ``alias``.

    ``alias``: ``RATELIMIT_USE_CACHE`` as the caller read it (default: read now).

    :raises InvalidCacheBackendError: if ``alias`` names no cache.
    """
    if alias is None:
        alias = conf.use_cache()
    prefix = get_settings().key_prefix
    found = _policies.get((group, methods, alias, prefix))
    if found is not None:
        return found
    if alias not in settings.CACHES:
        raise InvalidCacheBackendError(
            f"Could not find config for {alias!r} in settings.CACHES (RATELIMIT_USE_CACHE)"
        )
    with _lock:
        return _policies.setdefault(
            (group, methods, alias, prefix), _build_policy(group, methods, alias, prefix)
        )


@functools.lru_cache(maxsize=1024)
def _variant(policy: Policy, rate: Rate) -> Variant:
    """Return the variant of ``rate`` of ``policy``: its algorithm and keys, built once."""
    assert policy.rates is not None
    return policy.rates.variant(str(rate))


@functools.lru_cache(maxsize=32)
def _uncapped(period_ms: int) -> FixedWindow:
    """The fixed window of ``period_ms`` that allows every hit, so its reply is the count."""
    return FixedWindow(Rate(MAX_COUNT, period_ms))


def _hit(node: RedisNode, key: str, period_ms: int) -> tuple[int, int]:
    outcome = _uncapped(period_ms).hit(node, key, 1)
    return MAX_COUNT - outcome.remaining, outcome.reset_after_ms


def _look(node: RedisNode, key: str, variant: Variant, period_ms: int) -> tuple[int, int]:
    reading = read_now(variant.algorithm, node, key)
    count = int(reading.used)
    if count:
        return count, reading.outcome.reset_after_ms
    # No count yet: the time left in the window the server's clock is in.
    return 0, period_ms - node.now_ms() % period_ms


def count(
    alias: str, group: str, methods: str, rate: Rate, value: str, increment: bool
) -> Usage | None:
    """Count a call (``increment``) or read the count of ``value``; ``None`` if Redis cannot answer.

    ``alias``: ``RATELIMIT_USE_CACHE`` as the caller read it. One round
    trip (plus, once per rate, process and day, the rate's entry in the
    catalogue), whose time a counted call puts in ``django_rl_redis_seconds``
    as any decision's. An override of ``value`` set in the admin applies
    first, as to any policy: an exemption or a block is answered without
    Redis, a rate override counts at its rate.
    """
    if not django_cache.is_django_redis(alias):
        return _count_in_django_cache(alias, group, methods, rate, value, increment)
    policy = policy_for(group, methods, alias)
    variant = _variant(policy, rate)
    rule = _rule_for(policy.name, value)
    if rule is not None:
        if rule.action in (EXEMPT, BLOCK):
            return _overridden(rule, rate)
        variant, rate = _override(policy, rule.rate, variant, rate)
    key = policy.variant_key(variant, value)
    try:
        if increment:
            measured = metrics()
            began = time.perf_counter()
            used, left_ms = policy.backend.run(key, _hit, rate.period_ms)
            if measured is not None:
                measured.pending.observe(time.perf_counter() - began)
        else:
            used, left_ms = policy.backend.run(key, _look, variant, rate.period_ms)
    except RedisError:
        return None  # the node logged the outage or incident, once
    if increment:
        policy.note_rate(variant)
    return Usage(used, math.ceil(left_ms / 1000), rate.limit)


def _count_in_django_cache(
    alias: str, group: str, methods: str, rate: Rate, value: str, increment: bool
) -> Usage | None:
    """Count in a cache that is not django-redis, the original's way (``django_cache.py``).

    The admin's exemptions and blocks of ``value`` apply, as on Redis; its
    rate overrides do not (they change a Redis-backed policy's rate), and
    the admin's live counters cannot read such a cache.
    """
    rule = _rule_for(policy_name(group), value)
    if rule is not None and rule.action in (EXEMPT, BLOCK):
        return _overridden(rule, rate)
    counted = django_cache.count(alias, group, methods, rate, value, increment)
    if counted is None:
        return None
    used, left = counted
    return Usage(used, left, rate.limit)


def _rule_for(name: str, value: str) -> Rule | None:
    """Return the admin's override of ``value`` under the policy ``name``, or ``None``."""
    rules = rules_for(name)
    return None if rules is None else rules.match(value)


def _overridden(rule: Rule, rate: Rate) -> Usage:
    """Return the usage an exemption or a block answers, without counting."""
    if rule.action == EXEMPT:
        return Usage(0, 0, rate.limit, EXEMPT)
    return Usage(0, math.ceil(rule.retry_after(time.time())), rate.limit, BLOCK)


def _override(policy: Policy, text: str, variant: Variant, rate: Rate) -> tuple[Variant, Rate]:
    """Return the variant and rate of a rate override; the call's own if it cannot apply."""
    try:
        found = policy.override_variant(text)
    except (RateError, ParameterError, TypeError):
        return variant, rate  # logged by the policy's own decisions; the call's rate decides
    if not isinstance(found.algorithm, FixedWindow):
        return variant, rate
    return found, found.algorithm.rate


def known_policies() -> list[Policy]:
    """Return the drop-in's policies, for the admin and ``manage.py ratelimit`` (``DROPINS``).

    Those of the URLconf's views (``discovery.py``) and those this process
    used (``get_usage`` called from anywhere); none of the views' while
    ``RATELIMIT_USE_CACHE`` is not a django-redis cache (their counts are in
    that cache: ``django_cache.py``); never raises.
    """
    try:
        alias = conf.use_cache()
        if not django_cache.is_django_redis(alias):
            return list(_policies.values())
        for group, methods in url_groups():
            policy_for(group, methods, alias)
    except Exception:  # a bad RATELIMIT_USE_CACHE: only the policies already used
        pass
    return list(_policies.values())


def forget_policies() -> None:
    """Forget the policies this process built (their state in Redis stays), e.g. between tests."""
    with _lock:
        _policies.clear()
        _variant.cache_clear()


forget_on_change(forget_policies, "CACHES", "DJANGO_RL")
