"""Every way ``settings.DJANGO_RL`` can be wrong, as Problems with check ids.

One place knows the rules: ``checks.py`` reports all Problems through
``manage.py check``; ``conf.get_settings`` and the policy registry raise the
first one as a :class:`ConfigurationError` if a bad setting is used anyway.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from asgiref.sync import iscoroutinefunction
from django.utils.module_loading import import_string

from django_rl.algorithms import ALGORITHMS, ALL_PARAMETERS, ParameterError
from django_rl.algorithms.sliding_log import SlidingLog
from django_rl.conf import DEFAULTS
from django_rl.exceptions import ConfigurationError
from django_rl.headers import HEADER_MODES
from django_rl.identities import IdentitySpecError, resolve_identity
from django_rl.keys import INLINE_NAME, SAFE_NAME
from django_rl.plans import SAMPLE_RATE, RateSpecError, is_rate_function, resolve_rate_function
from django_rl.rates import RateError
from django_rl.reprs import short_repr

#: Policy keys every algorithm accepts.
COMMON_KEYS = frozenset({"algorithm", "key", "fail_open"})
#: Bounds of the deny cache settings (see ``deny_cache.py``).
MAX_DENY_CACHE_SIZE = 1_000_000
MAX_DENY_CACHE_MAX_AGE = 86_400
_NAME_RULE = "1 to 64 letters, digits, '.', '_' or '-'"
_RATE_FUNCTION_HINT = (
    "Give the dotted path of a callable(request) that returns a rate string such as "
    "'100/h', or None where the policy does not limit the request."
)
#: A sliding log that can take more Redis memory than this per identity is
#: warned about (``django_rl.W020``): 1 MB, a thousand clients take 1 GB.
LARGE_LOG_BYTES = 1_000_000


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the settings."""

    id: str
    msg: str
    hint: str

    def as_exception(self) -> ConfigurationError:
        return ConfigurationError(self.msg, check_id=self.id, hint=self.hint)


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
            _NAME_RULE,
        ),
        ("FAIL_OPEN", isinstance(merged["FAIL_OPEN"], bool), "True or False"),
        ("OVERRIDES", isinstance(merged["OVERRIDES"], bool), "True or False"),
        (
            "NUM_PROXIES",
            type(merged["NUM_PROXIES"]) is int and 0 <= merged["NUM_PROXIES"] <= 32,
            "a whole number from 0 (trust no X-Forwarded-For) to 32",
        ),
        ("POLICIES", isinstance(merged["POLICIES"], Mapping), "a dict of policy name -> dict"),
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
    return problems + deny_cache_problems(merged)


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


def ratelimited_view_problems(value: object, *, resolve: bool = True) -> list[Problem]:
    """Return what is wrong with ``DJANGO_RL["RATELIMITED_VIEW"]``.

    :param resolve: also import the view and check it is a sync callable
        (``manage.py check`` does; reading the settings does not import views).
    """
    where = "DJANGO_RL['RATELIMITED_VIEW']"
    hint = (
        "Set it to None (django_rl's own 429) or to the dotted path of a sync "
        "view(request, exception) that returns the response, e.g. 'myapp.views.rate_limited'."
    )
    if value is None:
        return []
    if not isinstance(value, str) or "." not in value:
        return [Problem("django_rl.E051", f"{where} is {short_repr(value)}", hint)]
    if not resolve:
        return []
    shown = short_repr(value)
    try:
        view = import_string(value)
    except ImportError as exc:
        return [Problem("django_rl.E051", f"{where} {shown} could not be imported: {exc}", hint)]
    if not callable(view):
        return [Problem("django_rl.E051", f"{where} {shown} is not callable", hint)]
    if iscoroutinefunction(view):
        return [Problem("django_rl.E051", f"{where} {shown} is an async function", hint)]
    return []


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

    :param where: how messages name the policy (a ``register_policy`` call,
        an inline policy's decorator).
    :param resolve: also import dotted paths (a key or rate function);
        without it, only what the spec says on its own is judged.
    :param inline: ``name`` is an inline policy's (``@group``).
    """
    where = where or f"DJANGO_RL['POLICIES'][{short_repr(name)}]"
    valid_name = INLINE_NAME if inline else SAFE_NAME
    if not isinstance(name, str) or not valid_name.fullmatch(name):
        return [Problem("django_rl.E005", f"{where}: bad policy name", f"Use {_NAME_RULE}.")]
    if not isinstance(spec, Mapping):
        return [
            Problem(
                "django_rl.E005",
                f"{where} must be a dict, not {type(spec).__name__}",
                "Write e.g. {'algorithm': 'sliding_log', 'rate': '5/m'}.",
            )
        ]
    problems = []
    unknown = sorted(set(spec) - COMMON_KEYS - ALL_PARAMETERS, key=short_repr)
    if unknown:
        known = ", ".join(sorted(COMMON_KEYS | ALL_PARAMETERS))
        problems.append(
            Problem(
                "django_rl.E005",
                f"{where} has unknown keys: {', '.join(map(short_repr, unknown))}",
                f"Policy keys are {known}. Check the spelling.",
            )
        )
    key = spec.get("key", "user_or_ip")
    deferred = not resolve and isinstance(key, str) and "." in key and ":" not in key
    try:
        if not callable(key) and not deferred:  # a dotted path is imported when used
            resolve_identity(key, num_proxies=num_proxies)
    except IdentitySpecError as exc:
        problems.append(
            Problem(
                "django_rl.E011",
                f"{where}: {exc}",
                "Use 'ip', 'user', 'user_or_ip', 'header:<Name>' or the dotted path "
                "of a callable(request) -> str | None.",
            )
        )
    rate = spec.get("rate")
    if "rate" in spec and is_rate_function(rate):
        # Per-plan rates: the function is judged here, the other parameters
        # with a sample rate (each rate is judged when the function returns it).
        if resolve:
            try:
                resolve_rate_function(rate)
            except RateSpecError as exc:
                problems.append(Problem("django_rl.E007", f"{where}: {exc}", _RATE_FUNCTION_HINT))
        spec = {**spec, "rate": SAMPLE_RATE}
    if "fail_open" in spec and not isinstance(spec["fail_open"], bool):
        problems.append(
            Problem(
                "django_rl.E030",
                f"{where}['fail_open'] is {short_repr(spec['fail_open'])}",
                "It must be True (allow when Redis cannot answer) or False (deny with 429); "
                "leave it out to follow DJANGO_RL['FAIL_OPEN'].",
            )
        )
    name_of_algorithm = spec.get("algorithm")
    algorithm = ALGORITHMS.get(name_of_algorithm) if isinstance(name_of_algorithm, str) else None
    if algorithm is None:
        problems.append(
            Problem(
                "django_rl.E006",
                f"{where} has "
                + (
                    f"an unknown algorithm {short_repr(spec['algorithm'])}"
                    if "algorithm" in spec
                    else "no 'algorithm'"
                ),
                f"Set 'algorithm' to one of {', '.join(ALGORITHMS)}.",
            )
        )
        return problems
    needs = ", ".join(sorted(algorithm.parameters))
    missing = sorted(algorithm.parameters - set(spec))
    if missing:
        problems.append(
            Problem(
                "django_rl.E008",
                f"{where} lacks {', '.join(map(repr, missing))}, which {algorithm.name} needs",
                f"{algorithm.name} takes {needs}.",
            )
        )
    extra = sorted((ALL_PARAMETERS - algorithm.parameters) & set(spec))
    if extra:
        problems.append(
            Problem(
                "django_rl.E009",
                f"{where} sets {', '.join(map(repr, extra))}, which {algorithm.name} does not use",
                f"{algorithm.name} takes {needs}; remove the others.",
            )
        )
    if missing:
        return problems
    try:
        algorithm.from_spec(spec)
    except RateError as exc:
        problems.append(
            Problem(
                "django_rl.E007",
                f"{where}: {exc}",
                "Write '<count>/<period>' with period s, m, h or d, e.g. '5/m' or '100/10m'.",
            )
        )
    except ParameterError as exc:
        problems.append(
            Problem("django_rl.E010", f"{where}: {exc}", f"{algorithm.name} takes {needs}.")
        )
    return problems


def policy_warnings(
    name: str, spec: Mapping[str, object], *, where: str | None = None
) -> list[Problem]:
    """Return what is risky, not wrong, about a policy that has no problems.

    ``django_rl.W020``: a ``sliding_log`` whose log can take more than
    :data:`LARGE_LOG_BYTES` of Redis memory per identity (a full window of
    hits of cost 1, one entry each). Not judged for per-plan rates, whose
    rates are known only per request.
    """
    if is_rate_function(spec.get("rate")):
        return []
    where = where or f"DJANGO_RL['POLICIES'][{name!r}]"
    algorithm = ALGORITHMS[str(spec["algorithm"])].from_spec(spec)
    if not isinstance(algorithm, SlidingLog) or algorithm.worst_case_bytes <= LARGE_LOG_BYTES:
        return []
    size = algorithm.worst_case_bytes
    return [
        Problem(
            "django_rl.W020",
            f"{where}: a sliding_log of {algorithm.rate} keeps up to "
            f"{algorithm.limit:,} entries per identity, about {size:,} bytes "
            f"({size / 1_000_000:,.1f} MB) of Redis memory for each client at the limit",
            "Use token_bucket (about 120 bytes per identity, whatever the rate) or "
            "fixed_window, or a lower limit over a shorter period. If the memory is planned "
            "for, add 'django_rl.W020' to SILENCED_SYSTEM_CHECKS.",
        )
    ]
