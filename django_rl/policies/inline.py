"""Inline policies: the policies ``@ratelimit(rate=...)`` makes, and the record of them.

An inline policy is a policy like any other once built (``policies.inline_policy``);
this module only knows its spec and name, and finds the specs of the
URLconf's views (:func:`url_specs`), so that ``manage.py check``,
``manage.py ratelimit policies`` and the admin's live counters see them.

**Names.** An inline policy's name is ``@`` and its ``group`` (by default the
view's dotted name): ``@login``. A group that is not 1 to 63 of
``A-Za-z0-9._-`` is digested: ``@~<24 hex>``. A policy name in settings
cannot hold ``@``, so an inline policy never shares state with a named one.

**Sharing.** Uses of one group share state when their algorithm, rate and key
are equal: they are one spec. Each distinct rate (or key) keeps its own state,
since the keys' fingerprint is made of the algorithm, the rate and the key.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from typing import Any

from django_rl.algorithms import ALGORITHMS
from django_rl.core.identities import KEY_HINT, IdentitySpecError, resolve_identity
from django_rl.core.rates import RateError, parse_rate
from django_rl.core.urlconf import PerURLconf
from django_rl.exceptions import ConfigurationError
from django_rl.policies.plans import function_label, is_rate_function

#: The algorithm of an inline policy that names none.
DEFAULT_ALGORITHM = "fixed_window"
#: The key of an inline policy that names none (as for policies in settings).
DEFAULT_KEY = "user_or_ip"
_VERBATIM_GROUP = re.compile(r"[A-Za-z0-9._-]{1,63}")


def policy_name(group: str) -> str:
    """Return the name of an inline policy of ``group``: ``@group``, or ``@~<digest>``."""
    if _VERBATIM_GROUP.fullmatch(group):
        return f"@{group}"
    digest = hashlib.blake2b(group.encode("utf-8", "surrogatepass"), digest_size=12)
    return f"@~{digest.hexdigest()}"


def view_name(view: Any) -> str:
    """Return the dotted name of ``view``: the default group of its inline policies.

    A class (or the class ``as_view()`` or DRF's ``@api_view`` made a function
    of), or a function; what ``method_decorator`` hands a decorator (a method
    bound to a view instance) names the instance's class.
    """
    target = getattr(view, "view_class", None) or getattr(view, "cls", None)
    if target is None:
        owner = getattr(getattr(view, "func", None), "__self__", None)
        target = type(owner) if owner is not None else view
    module = getattr(target, "__module__", None) or "?"
    qualname = str(getattr(target, "__qualname__", None) or getattr(target, "__name__", "?"))
    if "<locals>" in qualname:  # e.g. DRF's @api_view class: its __name__ is the function's
        qualname = getattr(target, "__name__", qualname)
    return f"{module}.{qualname}"


@dataclass(frozen=True)
class InlineSpec:
    """What one ``@ratelimit(rate=...)`` declares; equal specs share their state.

    ``rate`` is a rate string, or a rate function (callable or dotted path);
    ``key`` an identity spec as in settings, or a callable.
    """

    group: str
    algorithm: str
    rate: Any
    key: Any
    #: Every decision looks its policy up by the spec: hashed once, not per request.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.group, self.algorithm, self.rate, self.key)))

    def __hash__(self) -> int:
        return self._hash

    @property
    def name(self) -> str:
        return policy_name(self.group)

    def policy_spec(self) -> dict[str, Any]:
        """Return the spec as a policy in settings would write it."""
        return {"algorithm": self.algorithm, "rate": self.rate, "key": self.key}

    @property
    def key_text(self) -> str:
        """Return the key as text: it joins the keys' fingerprint."""
        return self.key if isinstance(self.key, str) else function_label(self.key)

    @property
    def rate_text(self) -> str:
        return self.rate if isinstance(self.rate, str) else function_label(self.rate)


def judge(*, rate: object, key: object, algorithm: object, group: object) -> None:
    """Check what an inline policy's arguments say on their own, when the decorator is applied.

    The rate's syntax, the algorithm, the key's form and the group's type.
    Dotted paths (a rate or key function) are imported only when used;
    ``manage.py check`` imports them.

    :raises TypeError: for arguments of the wrong type.
    :raises ConfigurationError: for a malformed rate (``django_rl.E007``), an
        unknown algorithm or one that needs more than a rate (``E006``), or a
        key that names no identity function (``E011``).
    """
    if group is not None and not isinstance(group, str):
        raise TypeError(f"ratelimit(group={group!r}): group must be a string")
    if group == "":
        raise ValueError("ratelimit(group=''): name the group, or leave it out")
    if not isinstance(algorithm, str):
        raise TypeError(f"ratelimit(algorithm={algorithm!r}): algorithm must be a name")
    kind = ALGORITHMS.get(algorithm)
    if kind is None or kind.parameters != frozenset({"rate"}):
        rate_only = ", ".join(n for n, a in ALGORITHMS.items() if a.parameters == {"rate"})
        raise ConfigurationError(
            f"ratelimit(algorithm={algorithm!r}): "
            + ("unknown algorithm" if kind is None else "it needs more than a rate"),
            check_id="django_rl.E006",
            hint=f"An inline policy takes {rate_only}; define other algorithms in "
            "DJANGO_RL['POLICIES'] (or with django_rl.register_policy) and name them.",
        )
    if not is_rate_function(rate):
        try:
            parse_rate(rate)
        except RateError as exc:
            raise ConfigurationError(
                f"ratelimit(rate={rate!r}): {exc}",
                check_id="django_rl.E007",
                hint="Write '<count>/<period>', e.g. '5/m' or '100/10m', or give a "
                "function of the request (or its dotted path) that returns one.",
            ) from exc
    if callable(key):
        return
    if isinstance(key, str) and "." in key and not key.startswith("header:"):
        return  # a dotted path: imported when used, checked by manage.py check
    try:
        resolve_identity(key)
    except IdentitySpecError as exc:
        raise ConfigurationError(
            f"ratelimit(key={key!r}): {exc}",
            check_id="django_rl.E011",
            hint=KEY_HINT,
        ) from exc


#: What ``view_name`` calls the stand-in function ``method_decorator`` decorates
#: once per class (the real decoration then happens on every request).
STAND_IN = "django.utils.decorators.dummy"


def url_specs() -> dict[InlineSpec, list[str]]:
    """Return the inline specs of the URLconf's views, each with the views that use it.

    Inline policies are found where decisions can be made: on the views the
    URLconf routes to (``django_rl_limits``, set by the decorator). A spec
    that ``method_decorator`` took from its stand-in gets the group the
    decorator gives it on each request: the view class's name. A URLconf
    that does not import is Django's own check's to report: nothing then.
    """
    found = _SPECS.get()
    return {} if found is None else {spec: list(users) for spec, users in found.items()}


def _specs_of(patterns: list[Any]) -> dict[InlineSpec, list[str]]:
    found: dict[InlineSpec, list[str]] = {}
    for pattern in patterns:
        callback = pattern.callback
        view = getattr(callback, "view_class", None) or getattr(callback, "cls", None)
        for limit in (
            *getattr(callback, "django_rl_limits", ()),
            *getattr(view, "django_rl_limits", ()),
        ):
            spec = getattr(limit, "inline", None)
            if spec is None:
                continue
            if spec.group == STAND_IN and view is not None:
                spec = replace(spec, group=view_name(view))
            users = found.setdefault(spec, [])
            if pattern.lookup_str not in users:
                users.append(pattern.lookup_str)
    return found


#: The admin asks on every poll: each URLconf is walked once.
_SPECS = PerURLconf(_specs_of)


__all__ = [
    "DEFAULT_ALGORITHM",
    "DEFAULT_KEY",
    "STAND_IN",
    "InlineSpec",
    "judge",
    "policy_name",
    "url_specs",
    "view_name",
]
