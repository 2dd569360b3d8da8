"""System checks: ``manage.py check`` reports every bad setting, ids ``django_rl.E0xx``.

=============== ==========================================================
id              problem
=============== ==========================================================
django_rl.E001  DJANGO_RL is not a dict, or has unknown keys
django_rl.E002  a top-level value has the wrong type or form
django_rl.E003  CONNECTION names an alias missing from CACHES
django_rl.E004  CONNECTION's cache is not a django-redis cache
django_rl.E005  a policy is not a dict, has a bad name or unknown keys
django_rl.E006  a policy has no algorithm, or an unknown one
django_rl.E007  a policy's rate does not parse
django_rl.E008  a policy lacks a parameter its algorithm needs
django_rl.E009  a policy sets a parameter its algorithm does not use
django_rl.E010  a parameter has a bad value (e.g. capacity)
django_rl.E011  a policy's key names no identity function
django_rl.E012  DEFAULT_POLICY names no policy
django_rl.E013  a view names a policy that does not exist
django_rl.E014  a view's @ratelimit cost is above the limit of a policy it names
django_rl.E030  a policy's fail_open is not True or False
django_rl.E031  a policy's fallback_rate is not a rate string
django_rl.E040  DENY_CACHE_SIZE is not a whole number from 0 to 1,000,000
django_rl.E041  DENY_CACHE_MAX_AGE is not a number of seconds in (0, 86400]
django_rl.E042  FALLBACK_MAX_IDENTITIES is not a whole number from 1 to 1,000,000
django_rl.E050  HEADERS is not "ietf", "legacy", "both" or None
django_rl.E051  RATELIMITED_VIEW is not the dotted path of a sync view
django_rl.E052  a DRF view's throttle_policies is not a list of names
django_rl.E080  IP_META_KEY is not None, a request.META key or a usable function
django_rl.E081  IPV4_PREFIX is not a whole number from 1 to 32
django_rl.E082  IPV6_PREFIX is not a whole number from 1 to 128
django_rl.E090  a rate of the DRF drop-in does not parse (contrib/drf_checks.py)
django_rl.E091  RATELIMIT_USE_CACHE names no cache (contrib/ratelimit_checks.py)
django_rl.E160  a RateLimitedTask names a policy that does not exist (contrib/celery_checks.py)
django_rl.E161  a RateLimitedTask's rate_policies is not a list of fixed-rate policies' names
django_rl.E162  a RateLimitedTask's rate_key is not callable
django_rl.E140  a websocket consumer names a policy that does not exist (contrib/channels_checks.py)
django_rl.E141  a consumer's connect_policies or message_policies is not a list of names
django_rl.E142  ASGI_APPLICATION does not import (its consumers cannot be checked)
=============== ==========================================================

``django_rl.W052`` warns about a DRF view whose ``throttle_scope`` or
``throttle_policies`` no throttle of it reads (:mod:`django_rl.checks.drf_views`).
``django_rl.W020`` warns about a ``sliding_log`` whose log can take more
than 1 MB of Redis memory per identity, ``django_rl.W021`` about a
``fallback_rate`` looser than the policy's rate (see
:func:`validation.policy_warnings`).
Warnings about the connection (``django_rl.W031``..``W033``: no socket
timeout, retries, a pool shared with another alias) are explained in
:mod:`django_rl.checks.connection_checks`; problems of a Redis Cluster or Sentinel
connection (``django_rl.E060``, ``E061``, ``W060``, ``W061``) in
:mod:`django_rl.checks.topology_checks`; the checks that ask the server itself
(``django_rl.E070``..``E073``, ``W070``, ``W071``, ``I070``: its version,
eviction policy, credentials, TLS, and a trial decision of each algorithm)
in :mod:`django_rl.checks.server_checks`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.utils.module_loading import import_string

from django_rl.algorithms import ALGORITHMS, StaticAlgorithm
from django_rl.checks import drf_views  # noqa: F401  (registers the DRF views' check)
from django_rl.checks.connection_checks import connection_warnings
from django_rl.checks.names import DJANGO_REDIS_BACKEND, SETTINGS_TAG
from django_rl.checks.server_checks import check_server  # noqa: F401  (registers it)
from django_rl.checks.site_checks import exempt_problems, rules_problems
from django_rl.checks.status_checks import status_policies_problems
from django_rl.checks.topology_checks import topology_problems
from django_rl.checks.validation import (
    Problem,
    ip_meta_key_problems,
    policy_problems,
    policy_warnings,
    ratelimited_view_problems,
    settings_problems,
)
from django_rl.conf import DEFAULTS, raw_settings
from django_rl.contrib import (
    celery_checks,  # noqa: F401  (Celery tasks' policies)
    channels_checks,  # noqa: F401  (the Channels mixin's consumers)
    drf_checks,  # noqa: F401  (registers the DRF drop-in's check)
    ratelimit_checks,  # noqa: F401  (the django-ratelimit drop-in's)
)
from django_rl.core.reprs import short_repr
from django_rl.core.urlconf import url_patterns
from django_rl.policies.inline import url_specs
from django_rl.policies.plans import is_rate_function
from django_rl.policies.registry import registered_policies


@register(SETTINGS_TAG)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    raw = raw_settings()
    problems = settings_problems(raw)
    warnings: list[Problem] = []
    if isinstance(raw, Mapping):
        merged = {**DEFAULTS, **raw}
        alias = merged["CONNECTION"]
        connection = _connection_problems(alias)
        problems += connection
        if isinstance(alias, str) and not connection:
            caches = getattr(django_settings, "CACHES", {})
            warnings = connection_warnings(alias, caches)
            for problem in topology_problems(alias, caches[alias]):
                (warnings if ".W" in problem.id else problems).append(problem)
        policies = merged["POLICIES"]
        if isinstance(policies, Mapping):
            num_proxies = merged["NUM_PROXIES"] if type(merged["NUM_PROXIES"]) is int else 0
            # Policies registered in code, then those of settings (which win).
            specs: dict[Any, tuple[Any, str | None]] = {
                name: (spec, f"register_policy({name!r})")
                for name, spec in registered_policies().items()
            }
            specs.update((name, (spec, None)) for name, spec in policies.items())
            limits = {}
            for name, (spec, where) in specs.items():
                found = policy_problems(name, spec, num_proxies=num_proxies, where=where)
                problems += found
                if not found:
                    algorithm = None
                    if not is_rate_function(spec.get("rate")):  # per-plan: known per request
                        algorithm = ALGORITHMS[spec["algorithm"]].from_spec(spec)
                    # rate None allows any cost, and "0/<period>" denies every
                    # request on purpose: no cost is too heavy for them (E014).
                    if algorithm is not None and not isinstance(algorithm, StaticAlgorithm):
                        limits[name] = algorithm.limit
                    warnings += policy_warnings(name, spec, where=where)
            problems += _reference_problems(merged["DEFAULT_POLICY"], specs, limits)
            problems += rules_problems(merged["RULES"], set(specs))
            problems += status_policies_problems(merged["STATUS_POLICIES"], set(specs))
            inline_problems, inline_warnings = _inline_problems(num_proxies)
            problems += inline_problems
            warnings += inline_warnings
        if all(p.id != "django_rl.E051" for p in problems):  # its form is right: import it
            problems += ratelimited_view_problems(merged["RATELIMITED_VIEW"])
        if all(p.id != "django_rl.E080" for p in problems):
            problems += ip_meta_key_problems(merged["IP_META_KEY"])
        problems += exempt_problems(merged["EXEMPT"])
    return [Error(p.msg, hint=p.hint, id=p.id) for p in problems] + [
        Warning(w.msg, hint=w.hint, id=w.id) for w in warnings
    ]


def _inline_problems(num_proxies: int) -> tuple[list[Problem], list[Problem]]:
    """Return the problems and warnings of the inline policies of the URLconf's views.

    What the decorator could judge alone it judged when applied; what is left
    is what needs imports (a key or rate function's dotted path).
    """
    problems: list[Problem] = []
    warnings: list[Problem] = []
    for spec, views in url_specs().items():
        where = f"@ratelimit(rate={spec.rate_text!r}) of view {', '.join(map(repr, views))}"
        found = policy_problems(
            spec.name, spec.policy_spec(), num_proxies=num_proxies, where=where, inline=True
        )
        problems += found
        if not found:
            warnings += policy_warnings(spec.name, spec.policy_spec(), where=where)
    return problems, warnings


def _connection_problems(alias: object) -> list[Problem]:
    if not isinstance(alias, str):
        return []  # reported as E002
    caches = getattr(django_settings, "CACHES", {})
    if alias not in caches:
        return [
            Problem(
                "django_rl.E003",
                f"DJANGO_RL['CONNECTION'] is {alias!r}, which is not in settings.CACHES",
                f"Add a django-redis cache named {alias!r} to CACHES, or set CONNECTION "
                "to an alias that is one.",
            )
        ]
    backend_path = caches[alias].get("BACKEND", "")
    try:
        from django_redis.cache import RedisCache

        backend = import_string(backend_path)
        is_django_redis = isinstance(backend, type) and issubclass(backend, RedisCache)
    except ImportError:
        is_django_redis = False
    if is_django_redis:
        return []
    return [
        Problem(
            "django_rl.E004",
            f"CACHES[{alias!r}] uses {backend_path!r}, not a django-redis cache",
            f"django_rl runs on django-redis connections: set its BACKEND to "
            f"{DJANGO_REDIS_BACKEND!r}.",
        )
    ]


def _reference_problems(
    default_policy: object, policies: Mapping[Any, Any], limits: Mapping[str, int]
) -> list[Problem]:
    """Return the problems of names and costs that refer to policies.

    :param limits: the limit of each valid policy.
    """
    known = ", ".join(map(short_repr, sorted(policies, key=short_repr))) or "none"
    problems = []
    if isinstance(default_policy, str) and default_policy not in policies:
        problems.append(
            Problem(
                "django_rl.E012",
                f"DJANGO_RL['DEFAULT_POLICY'] is {default_policy!r}, which is not a policy",
                f"Known policies: {known}.",
            )
        )
    for where, name, cost in _policies_named_by_views():
        if name is None:
            problems.append(
                Problem(
                    "django_rl.E052",
                    f"{where} has throttle_policies that are not a list of policy names",
                    "Write e.g. throttle_policies = ['burst', 'daily'] (a list or tuple "
                    "of names; a bare string is a common slip).",
                )
            )
        elif name not in policies:
            problems.append(
                Problem(
                    "django_rl.E013",
                    f"{where} names the rate-limit policy {name!r}, which does not exist",
                    f"Define it in DJANGO_RL['POLICIES']. Known policies: {known}.",
                )
            )
        elif name in limits and cost > limits[name]:
            problems.append(
                Problem(
                    "django_rl.E014",
                    f"{where} weighs a request at cost {short_repr(cost)} under the rate-limit "
                    f"policy {name!r}, whose limit is {limits[name]}: every such request is denied",
                    f"Lower the cost to at most {limits[name]}, or raise the policy's limit.",
                )
            )
    return problems


def _policies_named_by_views() -> Iterator[tuple[str, str | None, int]]:
    """Yield (view, policy name, cost) for every @ratelimit and PolicyThrottle name in the URLconf.

    The cost is the highest a ``@ratelimit`` of the view gives the policy (1
    for ``PolicyThrottle``). The name is ``None`` for a view whose
    ``throttle_policies`` is malformed.
    """
    patterns = url_patterns()
    if patterns is None:
        return
    throttle = _policy_throttle_class()
    for pattern in patterns:
        callback = pattern.callback
        view = getattr(callback, "view_class", None) or getattr(callback, "cls", None)
        # as_view() copies dispatch's attributes onto the callback, so a
        # decorated class can show its names twice.
        names = set(getattr(callback, "django_rl_policies", ()))
        names.update(getattr(view, "django_rl_policies", ()))
        costs: dict[str, int] = {}
        for limit in (
            *getattr(callback, "django_rl_limits", ()),
            *getattr(view, "django_rl_limits", ()),
        ):
            for name in limit.names:
                costs[name] = max(costs.get(name, 1), limit.cost)
        where = f"view {pattern.lookup_str!r}"
        classes = getattr(view, "throttle_classes", ())
        if throttle is not None and any(
            isinstance(c, type) and issubclass(c, throttle) for c in classes
        ):
            scope = getattr(view, "throttle_scope", None)
            if isinstance(scope, str):
                names.add(scope)
            more = getattr(view, "throttle_policies", ())
            if isinstance(more, (list, tuple)) and all(isinstance(n, str) for n in more):
                names.update(more)
            else:
                yield where, None, 1
        for name in sorted(names):
            yield where, name, costs.get(name, 1)


def _policy_throttle_class() -> type | None:
    try:
        from django_rl.throttling import PolicyThrottle
    except ImportError:  # DRF is not installed
        return None
    return PolicyThrottle
