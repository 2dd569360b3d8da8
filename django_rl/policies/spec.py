"""One policy's spec, parsed once: the parts a policy is built of, or what is wrong with it.

A spec is an entry of ``DJANGO_RL["POLICIES"]``, a ``register_policy``
call's dict, or an inline policy's (``@ratelimit(rate=...)``).
:func:`parse_policy` judges it and resolves what it names (the identity
function, the rate or rate function, the algorithm) in one pass: the
registry builds the :class:`~django_rl.policies.policy.Policy` from the
:class:`ParsedPolicy`, and ``manage.py check`` reports the same
:class:`~django_rl.core.problems.Problem` list (``checks/validation.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django_rl.algorithms import ALGORITHMS, ALL_PARAMETERS, Algorithm, ParameterError
from django_rl.algorithms.blocking import Blocks
from django_rl.core.identities import (
    KEY_HINT,
    AddressSettings,
    IdentityFunction,
    IdentitySpecError,
    checked_identity,
    resolve_identity,
)
from django_rl.core.keys import INLINE_NAME, SAFE_NAME
from django_rl.core.problems import Problem
from django_rl.core.rates import RateError, parse_rate
from django_rl.core.reprs import short_repr
from django_rl.docs_urls import doc_url
from django_rl.policies.blocks_spec import BLOCK_KEYS, blocks_problems
from django_rl.policies.charging import Charging
from django_rl.policies.charging_checks import charging_of
from django_rl.policies.fallback import CALENDAR_RATE, ZERO_FALLBACK
from django_rl.policies.plans import (
    SAMPLE_RATE,
    RateFunction,
    RateSpecError,
    function_label,
    is_rate_function,
    resolve_rate_function,
)

#: Policy keys every algorithm accepts.
COMMON_KEYS = (
    frozenset({"algorithm", "key", "fail_open", "fallback_rate", "mode", "enforce_percent"})
    | BLOCK_KEYS
    | {"count_when", "costs", "charge"}
)
#: A policy's ``mode``: it denies (``enforce``), or only counts and reports (``shadow``).
MODES = ("enforce", "shadow")
#: The hint of every malformed rate (django_rl.E007).
RATE_HINT = (
    "Write e.g. '5/m', '100/10m', '1000/hour', '100/10' (per 10 s), "
    "'0/m' (deny every request) or None (no limit)."
)
NAME_RULE = "1 to 64 letters, digits, '.', '_' or '-'"
RATE_FUNCTION_HINT = (
    "Give the dotted path of a callable(request) that returns a rate string such as "
    "'100/h', or None where the policy does not limit the request."
)


@dataclass(frozen=True)
class ParsedPolicy:
    """What a valid spec says, resolved: what the registry builds a policy of.

    :ivar identify: the identity function; ``None`` when not resolved (a
        dotted path, parsed with ``resolve=False``).
    :ivar algorithm: the algorithm at the policy's rate; ``None`` for a rate
        function (each rate's is built when the function returns it).
    :ivar rate_function: the rate function (per-plan rates), resolved.
    :ivar rate: the rate as written (``""`` for a function or no rate).
    :ivar fail_open: the policy's own ``fail_open``, or ``None`` (the setting's).
    """

    name: str
    spec: Mapping[str, Any]
    identify: IdentityFunction | None
    algorithm: Algorithm | None
    rate_function: RateFunction | None
    rate_label: str
    rate: str
    fail_open: bool | None
    shadow: bool
    fallback_rate: str | None
    #: The share of identities enforced, 0 to 100 (``rollout.py``).
    enforce_percent: float = 100.0
    #: ``block_for`` and ``escalate`` (``blocks_spec.py``); ``None``: no blocks.
    blocks: Blocks | None = None
    #: ``count_when``, ``costs``, ``charge`` (``charging.py``), or ``None`` when none is set.
    charging: Charging | None = None


@dataclass
class Parse:
    """The result of :func:`parse_policy`: the parsed policy, or (and) its problems."""

    problems: list[Problem] = field(default_factory=list)
    policy: ParsedPolicy | None = None

    def parsed(self) -> ParsedPolicy:
        """Return the parsed policy.

        :raises ConfigurationError: the first problem, if any.
        """
        if self.problems or self.policy is None:
            raise self.problems[0].as_exception()
        return self.policy


def parse_policy(
    name: object,
    spec: object,
    *,
    addresses: AddressSettings | None = None,
    num_proxies: int = 0,
    where: str | None = None,
    resolve: bool = True,
    inline: bool = False,
) -> Parse:
    """Judge and resolve one policy's spec: an entry of ``DJANGO_RL["POLICIES"]`` by default.

    :param addresses: how the identity finds a client's address (the
        settings'); by default ``num_proxies`` alone.
    :param where: how messages name the policy (a ``register_policy`` call,
        an inline policy's decorator).
    :param resolve: also import dotted paths (a key or rate function);
        without it, only what the spec says on its own is judged, and
        nothing is parsed (``Parse.policy`` is ``None``).
    :param inline: ``name`` is an inline policy's (``@group``).
    :raises ConfigurationError: if ``addresses`` names an ``IP_META_KEY``
        function that cannot be used (``django_rl.E080``, a settings problem).
    """
    where = where or f"DJANGO_RL['POLICIES'][{short_repr(name)}]"
    valid_name = INLINE_NAME if inline else SAFE_NAME
    if not isinstance(name, str) or not valid_name.fullmatch(name):
        return Parse([Problem("django_rl.E005", f"{where}: bad policy name", f"Use {NAME_RULE}.")])
    if not isinstance(spec, Mapping):
        return Parse(
            [
                Problem(
                    "django_rl.E005",
                    f"{where} must be a dict, not {type(spec).__name__}",
                    "Write e.g. {'algorithm': 'sliding_log', 'rate': '5/m'}.",
                )
            ]
        )
    problems: list[Problem] = []
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
    identify = _identity(spec, where, addresses, num_proxies, resolve, problems)
    rate = spec.get("rate")  # concurrency has none
    rate_function = None
    if "rate" in spec and is_rate_function(rate):
        # Per-plan rates: the function is judged here, the other parameters
        # with a sample rate (each rate is judged when the function returns it).
        if resolve:
            try:
                rate_function = resolve_rate_function(rate)
            except RateSpecError as exc:
                problems.append(Problem("django_rl.E007", f"{where}: {exc}", RATE_FUNCTION_HINT))
        kind = ALGORITHMS.get(spec.get("algorithm"))  # type: ignore[arg-type]
        spec = {**spec, "rate": getattr(kind, "sample_rate", SAMPLE_RATE)}
    problems += _mode_problems(spec, where) + fallback_rate_problems(spec, where)
    blocks, found = blocks_problems(spec, where)
    problems += found
    algorithm = _algorithm(spec, where, problems)
    charging = charging_of(spec, where, algorithm, problems, resolve=resolve)
    if problems or not resolve:
        return Parse(problems)
    if rate_function is not None:
        algorithm = None
    return Parse(
        policy=ParsedPolicy(
            name=name,
            spec=spec if rate_function is None else {**spec, "rate": rate},
            identify=identify,
            algorithm=algorithm,
            rate_function=rate_function,
            rate_label=function_label(rate) if rate_function is not None else "",
            rate=(
                rate
                if isinstance(rate, str) and rate_function is None
                else getattr(algorithm, "rate_text", "")  # a quota's "<limit>/<period>"
            ),
            fail_open=spec.get("fail_open"),
            shadow=spec.get("mode") == "shadow",
            fallback_rate=spec.get("fallback_rate"),
            enforce_percent=float(spec.get("enforce_percent", 100)),
            blocks=blocks,
            charging=charging,
        )
    )


def _identity(
    spec: Mapping[str, Any],
    where: str,
    addresses: AddressSettings | None,
    num_proxies: int,
    resolve: bool,
    problems: list[Problem],
) -> IdentityFunction | None:
    key = spec.get("key", "user_or_ip")
    if callable(key):
        return checked_identity(key, function_label(key))
    if not resolve and isinstance(key, str) and "." in key and ":" not in key:
        return None  # a dotted path is imported when the policy is first used
    try:
        if addresses is not None:
            return resolve_identity(key, addresses=addresses)
        return resolve_identity(key, num_proxies=num_proxies)
    except IdentitySpecError as exc:
        problems.append(Problem("django_rl.E011", f"{where}: {exc}", KEY_HINT))
        return None


def is_percent(value: object) -> bool:
    """Return whether ``value`` is a valid ``enforce_percent``: a number from 0 to 100."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and 0 <= value <= 100  # (NaN fails this)
    )


def _mode_problems(spec: Mapping[str, Any], where: str) -> list[Problem]:
    problems = []
    if "fail_open" in spec and not isinstance(spec["fail_open"], bool):
        problems.append(
            Problem(
                "django_rl.E030",
                f"{where}['fail_open'] is {short_repr(spec['fail_open'])}",
                "It must be True (allow when Redis cannot answer) or False (deny with 429); "
                "leave it out to follow DJANGO_RL['FAIL_OPEN'].",
            )
        )
    if "enforce_percent" in spec and not is_percent(spec["enforce_percent"]):
        problems.append(
            Problem(
                "django_rl.E033",
                f"{where}['enforce_percent'] is {short_repr(spec['enforce_percent'])}",
                "It must be a number from 0 to 100: the share of identities the policy "
                "enforces; the others are decided in shadow mode (100, the default: every "
                "identity). " + doc_url("settings", "percent-enforced-rollout"),
            )
        )
    if "mode" in spec and spec["mode"] not in MODES:
        problems.append(
            Problem(
                "django_rl.E032",
                f"{where}['mode'] is {short_repr(spec['mode'])}",
                "Use 'enforce' (the default: the policy denies) or 'shadow' (it counts and "
                "reports what it would deny, and never denies).",
            )
        )
    return problems


def _algorithm(spec: Mapping[str, Any], where: str, problems: list[Problem]) -> Algorithm | None:
    """Return the algorithm ``spec`` makes (at its rate), or ``None`` with its problems added."""
    name_of_algorithm = spec.get("algorithm")
    kind = ALGORITHMS.get(name_of_algorithm) if isinstance(name_of_algorithm, str) else None
    if kind is None:
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
        return None
    needs = ", ".join(sorted(kind.parameters))
    optional: frozenset[str] = getattr(kind, "optional_parameters", frozenset())
    instead: Mapping[str, str] = getattr(kind, "alternatives", {})
    missing = sorted(
        k for k in kind.parameters - optional - set(spec) if instead.get(k, "") not in spec
    )
    if missing:
        problems.append(
            Problem(
                "django_rl.E008",
                f"{where} lacks {', '.join(map(repr, missing))}, which {kind.name} needs",
                f"{kind.name} takes {needs}.",
            )
        )
    extra = sorted((ALL_PARAMETERS - kind.parameters) & set(spec))
    if extra:
        problems.append(
            Problem(
                "django_rl.E009",
                f"{where} sets {', '.join(map(repr, extra))}, which {kind.name} does not use",
                f"{kind.name} takes {needs}; remove the others.",
            )
        )
    if missing:
        return None
    try:
        return kind.from_spec(spec)
    except RateError as exc:
        problems.append(Problem("django_rl.E007", f"{where}: {exc}", RATE_HINT))
    except ParameterError as exc:
        hint = getattr(exc, "hint", None) or f"{kind.name} takes {needs}."
        problems.append(Problem("django_rl.E010", f"{where}{_key_message(exc)}", hint))
    return None


def _key_message(exc: ParameterError) -> str:
    """A parameter error's message after the policy's name: ``['key'] ...`` reads as an index."""
    text = str(exc)
    return text if text.startswith("[") else f": {text}"


def fallback_rate_problems(spec: Mapping[str, object], where: str) -> list[Problem]:
    """Return what is wrong with a policy's ``fallback_rate`` (absent or ``None``: nothing)."""
    rate = spec.get("fallback_rate")
    if rate is None:
        return []
    why = (
        "it is a rate function: a fallback_rate is one rate string for every request"
        if is_rate_function(rate)
        else None
    )
    if why is None and spec.get("algorithm") == "quota" and isinstance(rate, str):
        # A quota's fallback may name a calendar period: "500/month" (fallback.py).
        found = CALENDAR_RATE.fullmatch(rate)
        if found is not None and int(found[1]):
            return []
    if why is None:
        try:
            if parse_rate(rate).limit == 0:
                why = ZERO_FALLBACK.format(rate=short_repr(rate))
        except RateError as exc:
            why = str(exc)
    if why is None:
        return []
    return [
        Problem(
            "django_rl.E031",
            f"{where}['fallback_rate']: {why}",
            "Write '<count>/<period>', e.g. '5/m' (a quota's may name a period of its "
            "calendar, e.g. '500/month'): what each process allows per identity "
            "while Redis cannot answer; leave it out to follow fail_open.",
        )
    ]
