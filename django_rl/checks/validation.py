"""Every way ``settings.DJANGO_RL`` can be wrong, as Problems with check ids.

A policy's own spec is judged by its one parse (``policies/spec.py``); the
rest of the settings here.

One place knows the rules: ``checks.py`` reports all Problems through
``manage.py check``; ``conf.get_settings`` and the policy registry raise the
first one as a :class:`ConfigurationError` if a bad setting is used anyway.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from asgiref.sync import iscoroutinefunction
from django.utils.module_loading import import_string

from django_rl.algorithms import ALGORITHMS
from django_rl.algorithms.sliding_log import SlidingLog
from django_rl.conf import DEFAULTS, HEADER_MODES
from django_rl.core.identities import META_KEY
from django_rl.core.keys import SAFE_NAME
from django_rl.core.problems import Problem
from django_rl.core.rates import Rate, parse_rate
from django_rl.core.reprs import plural, short_repr
from django_rl.docs_urls import doc_url
from django_rl.http.responses import ratelimited_view_problems
from django_rl.policies.plans import is_rate_function
from django_rl.policies.spec import (
    COMMON_KEYS,
    MODES,
    NAME_RULE,
    RATE_HINT,
    fallback_rate_problems,
    parse_policy,
)

#: Bounds of the deny cache settings (see ``deny_cache.py``).
MAX_DENY_CACHE_SIZE = 1_000_000
MAX_DENY_CACHE_MAX_AGE = 86_400
#: Bound of ``FALLBACK_MAX_IDENTITIES`` (see ``fallback.py``): at most 400 MB
#: per policy with a fallback_rate and process, at the worst-case bytes per
#: identity of docs/reliability.md (400).
MAX_FALLBACK_IDENTITIES = 1_000_000
#: A sliding log that can take more Redis memory than this per identity is
#: warned about (``django_rl.W020``): 1 MB, a thousand clients take 1 GB.
LARGE_LOG_BYTES = 1_000_000


def settings_problems(raw: object) -> list[Problem]:
    """Return what is wrong with the top level of ``DJANGO_RL`` (not each policy)."""
    if not isinstance(raw, Mapping):
        return [
            Problem(
                "django_rl.E001",
                f"settings.DJANGO_RL must be a dict, not {type(raw).__name__}",
                "Write DJANGO_RL = {'POLICIES': {...}} in your settings.",
            )
        ]
    problems = []
    unknown = sorted(set(raw) - set(DEFAULTS), key=short_repr)
    if unknown:
        problems.append(
            Problem(
                "django_rl.E001",
                f"settings.DJANGO_RL has unknown keys: {', '.join(map(short_repr, unknown))}",
                f"Known keys are {', '.join(DEFAULTS)}. Check the spelling.",
            )
        )
    merged = {**DEFAULTS, **raw}
    checks = [
        ("CONNECTION", isinstance(merged["CONNECTION"], str), "the name of a CACHES alias"),
        (
            "KEY_PREFIX",
            isinstance(merged["KEY_PREFIX"], str) and SAFE_NAME.fullmatch(merged["KEY_PREFIX"]),
            NAME_RULE,
        ),
        ("FAIL_OPEN", isinstance(merged["FAIL_OPEN"], bool), "True or False"),
        ("OVERRIDES", isinstance(merged["OVERRIDES"], bool), "True or False"),
        (
            "METRICS",
            isinstance(merged["METRICS"], bool),
            "True (Prometheus metrics whenever prometheus_client is installed) or False",
        ),
        (
            "HISTORY",
            isinstance(merged["HISTORY"], bool),
            "True (the last hour per policy in Redis, for the admin's charts) or False",
        ),
        (
            "SHADOW",
            isinstance(merged["SHADOW"], bool),
            "True (every policy in shadow mode: it counts but never denies) or False",
        ),
        (
            "NUM_PROXIES",
            type(merged["NUM_PROXIES"]) is int and 0 <= merged["NUM_PROXIES"] <= 32,
            "a whole number from 0 (trust no X-Forwarded-For) to 32",
        ),
        ("POLICIES", isinstance(merged["POLICIES"], Mapping), "a dict of policy name -> dict"),
        (
            "CLOCK",
            merged["CLOCK"] in ("server", "app"),
            "'server' (time from the Redis server) or 'app' (from this host's clock)",
        ),
        (
            "DEFAULT_POLICY",
            merged["DEFAULT_POLICY"] is None or isinstance(merged["DEFAULT_POLICY"], str),
            "None or a policy name",
        ),
    ]
    for name, ok, expected in checks:
        if not ok:
            problems.append(
                Problem(
                    "django_rl.E002",
                    f"DJANGO_RL[{name!r}] is {short_repr(merged[name])}",
                    f"It must be {expected}.",
                )
            )
    if merged["HEADERS"] not in HEADER_MODES:
        problems.append(
            Problem(
                "django_rl.E050",
                f"DJANGO_RL['HEADERS'] is {short_repr(merged['HEADERS'])}",
                "Use 'ietf' (RateLimit-Policy and RateLimit), 'legacy' (X-RateLimit-*), "
                "'both', or None to send no rate-limit headers.",
            )
        )
    problems += ratelimited_view_problems(merged["RATELIMITED_VIEW"], resolve=False)
    problems += ip_meta_key_problems(merged["IP_META_KEY"], resolve=False)
    return (
        problems + prefix_problems(merged) + deny_cache_problems(merged) + fallback_problems(merged)
    )


#: The prefix settings: (IP version, most bits, check id, what the default means).
PREFIXES = {
    "IPV4_PREFIX": (4, 32, "django_rl.E081", "32, the default: each address; 24: each /24"),
    "IPV6_PREFIX": (6, 128, "django_rl.E082", "64, the default: each /64; 128: each address"),
}


def prefix_problems(merged: Mapping[str, object]) -> list[Problem]:
    """Return what is wrong with ``IPV4_PREFIX`` and ``IPV6_PREFIX``.

    0 is refused with the rest: one bucket for every client is a key function
    that returns one identity, not an address rule.
    """
    problems = []
    for name, (version, bits, check_id, meaning) in PREFIXES.items():
        value = merged[name]
        if type(value) is not int or not 1 <= value <= bits:
            problems.append(
                Problem(
                    check_id,
                    f"DJANGO_RL[{name!r}] is {short_repr(value)}",
                    f"It must be a whole number from 1 to {bits}: how many leading bits of an "
                    f"IPv{version} address make one client's bucket ({meaning}).",
                )
            )
    return problems


def ip_meta_key_problems(value: object, *, resolve: bool = True) -> list[Problem]:
    """Return what is wrong with ``IP_META_KEY``.

    :param resolve: also import a dotted path and check it is a sync callable
        (``manage.py check`` does; reading the settings does not import it).
    """
    where = "DJANGO_RL['IP_META_KEY']"
    hint = (
        "Set it to None (REMOTE_ADDR, and X-Forwarded-For with NUM_PROXIES), a request.META "
        "key such as 'HTTP_CF_CONNECTING_IP', or the dotted path of a "
        "function(request) -> str | None."
    )
    shown = short_repr(value)
    if value is None:
        return []
    if not isinstance(value, str):
        if not callable(value):
            return [Problem("django_rl.E080", f"{where} is {shown}", hint)]
        function = value
    elif "." not in value:
        if META_KEY.fullmatch(value):
            return []
        if re.fullmatch(r"[A-Za-z0-9_-]{1,95}", value):  # lower case, or a header's name
            meta_key = value.upper().replace("-", "_")
            if meta_key.startswith("HTTP_"):
                hint = f"request.META keys are upper case: {meta_key!r}."
            else:
                meta_key = "HTTP_" + meta_key
                hint = f"request.META keys are upper case: the header {shown} is {meta_key!r}."
        return [Problem("django_rl.E080", f"{where} {shown} is not a request.META key", hint)]
    elif not resolve:
        return []
    else:
        try:
            function = import_string(value)
        except ImportError as exc:
            return [
                Problem("django_rl.E080", f"{where} {shown} could not be imported: {exc}", hint)
            ]
        if not callable(function):
            return [Problem("django_rl.E080", f"{where} {shown} is not callable", hint)]
    if iscoroutinefunction(function):
        return [Problem("django_rl.E080", f"{where} {shown} is an async function", hint)]
    return []


def fallback_problems(merged: Mapping[str, object]) -> list[Problem]:
    """Return what is wrong with ``FALLBACK_MAX_IDENTITIES``."""
    size = merged["FALLBACK_MAX_IDENTITIES"]
    if type(size) is int and 1 <= size <= MAX_FALLBACK_IDENTITIES:
        return []
    return [
        Problem(
            "django_rl.E042",
            f"DJANGO_RL['FALLBACK_MAX_IDENTITIES'] is {short_repr(size)}",
            f"It must be a whole number from 1 to {MAX_FALLBACK_IDENTITIES:,}: the most "
            "identities each process counts locally for each policy's fallback_rate while "
            "Redis cannot answer.",
        )
    ]


def deny_cache_problems(merged: Mapping[str, object]) -> list[Problem]:
    """Return what is wrong with ``DENY_CACHE_SIZE`` and ``DENY_CACHE_MAX_AGE``."""
    problems = []
    size = merged["DENY_CACHE_SIZE"]
    if type(size) is not int or not 0 <= size <= MAX_DENY_CACHE_SIZE:
        problems.append(
            Problem(
                "django_rl.E040",
                f"DJANGO_RL['DENY_CACHE_SIZE'] is {short_repr(size)}",
                f"It must be a whole number from 0 (no deny cache) to {MAX_DENY_CACHE_SIZE:,}: "
                "the most denials each process remembers.",
            )
        )
    age = merged["DENY_CACHE_MAX_AGE"]
    if not (
        isinstance(age, (int, float))
        and not isinstance(age, bool)
        and 0 < age <= MAX_DENY_CACHE_MAX_AGE  # NaN fails this too
    ):
        problems.append(
            Problem(
                "django_rl.E041",
                f"DJANGO_RL['DENY_CACHE_MAX_AGE'] is {short_repr(age)}",
                f"It must be a number of seconds above 0 and at most {MAX_DENY_CACHE_MAX_AGE:,}: "
                "how long a process may answer a denial without asking Redis again.",
            )
        )
    return problems


def policy_problems(
    name: object,
    spec: object,
    *,
    num_proxies: int = 0,
    where: str | None = None,
    resolve: bool = True,
    inline: bool = False,
) -> list[Problem]:
    """Return what is wrong with one policy: an entry of ``DJANGO_RL["POLICIES"]`` by default.

    The one parse of a spec (``policies/spec.py``), whose problems the
    registry raises when such a policy is used. See :func:`parse_policy`.
    """
    return parse_policy(
        name, spec, num_proxies=num_proxies, where=where, resolve=resolve, inline=inline
    ).problems


def policy_warnings(
    name: str, spec: Mapping[str, object], *, where: str | None = None
) -> list[Problem]:
    """Return what is risky, not wrong, about a policy that has no problems.

    ``django_rl.W020``: a ``sliding_log`` whose log can take more than
    :data:`LARGE_LOG_BYTES` of Redis memory per identity (a full window of
    hits of cost 1, one entry each). ``django_rl.W021``: a ``fallback_rate``
    that allows more hits per second than the policy's rate. Neither is
    judged for per-plan rates, whose rates are known only per request.
    """
    if is_rate_function(spec.get("rate")):
        return []
    where = where or f"DJANGO_RL['POLICIES'][{name!r}]"
    algorithm = ALGORITHMS[str(spec["algorithm"])].from_spec(spec)
    warnings = _fallback_warnings(spec, algorithm, where)
    large = large_log_warning(algorithm, where)
    return warnings if large is None else [*warnings, large]


def large_log_warning(algorithm: object, where: str) -> Problem | None:
    """Return ``django_rl.W020`` if ``algorithm`` is a sliding log too large per identity.

    The one rule, for settings (``manage.py check``) and for the admin's
    rate overrides: more than :data:`LARGE_LOG_BYTES` of Redis memory per
    identity (a full window of hits of cost 1, one entry each).
    """
    if not isinstance(algorithm, SlidingLog) or algorithm.worst_case_bytes <= LARGE_LOG_BYTES:
        return None
    size = algorithm.worst_case_bytes
    return Problem(
        "django_rl.W020",
        f"{where}: a sliding_log of {algorithm.rate} keeps up to "
        f"{algorithm.limit:,} {plural(algorithm.limit, 'entry', 'entries')} per identity, "
        f"about {size:,} bytes ({size / 1_000_000:,.1f} MB) of Redis memory for each client "
        "at the limit",
        "Use token_bucket (about 120 bytes per identity, whatever the rate) or "
        "fixed_window, or a lower limit over a shorter period. If the memory is planned "
        "for, add 'django_rl.W020' to SILENCED_SYSTEM_CHECKS.",
    )


def _fallback_warnings(spec: Mapping[str, object], algorithm: object, where: str) -> list[Problem]:
    """Return ``django_rl.W021`` if the fallback allows more per second than the policy's rate."""
    text = spec.get("fallback_rate")
    rate = getattr(algorithm, "rate", None)
    if text is None or not isinstance(rate, Rate):
        return []
    fallback = parse_rate(text)
    # Exact in integers: fallback.limit / fallback.period > rate.limit / rate.period.
    if fallback.limit * rate.period_ms <= rate.limit * fallback.period_ms:
        return []
    return [
        Problem(
            "django_rl.W021",
            f"{where}: fallback_rate {short_repr(text)} allows more per second than the "
            f"policy's rate {rate}: while Redis cannot answer, each process lets through "
            "more than the whole site does when it can",
            "Use a fallback_rate of at most the policy's rate divided by the number of "
            "processes: "
            + doc_url("reliability", "outage-fallback-keep-limiting-while-redis-cannot-answer"),
        )
    ]


__all__ = [
    "COMMON_KEYS",
    "MODES",
    "RATE_HINT",
    "Problem",
    "fallback_rate_problems",
    "policy_problems",
    "ratelimited_view_problems",
]
