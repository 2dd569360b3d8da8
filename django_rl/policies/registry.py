"""The policy registry: policies from settings, from code, and inline.

A policy is named in ``DJANGO_RL["POLICIES"]``, registered in code with
:func:`register_policy`, or made by ``@ratelimit(rate=...)`` (an inline
policy, see ``inline.py``). All three are the same :class:`Policy`
(``policy.py``), built on first use and kept until the settings change.
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from django_rl.algorithms.windows import quota_window
from django_rl.backends import get_backend
from django_rl.conf import Settings, forget_on_change, get_settings
from django_rl.core.reprs import short_repr
from django_rl.exceptions import ConfigurationError, UnknownPolicy
from django_rl.policies import block_reading
from django_rl.policies.blocks_spec import with_blocks
from django_rl.policies.deny_cache import get_deny_cache
from django_rl.policies.fallback import LocalFallback, fallback_calendar, get_fallback_store
from django_rl.policies.inline import InlineSpec, policy_name, url_specs
from django_rl.policies.plans import (
    PlanRates,
    Variant,
    algorithm_at,
    make_variant,
)
from django_rl.policies.policy import DEGRADED_RETRY_AFTER, Policy
from django_rl.policies.rollout import track
from django_rl.policies.spec import parse_policy


def build_policy(
    name: str,
    spec: Mapping[str, Any],
    settings: Settings,
    *,
    where: str,
    extra: str = "",
    inline: bool = False,
) -> Policy:
    """Build the policy ``spec`` describes.

    :param where: how messages name the spec.
    :param extra: what joins the keys' fingerprint besides the algorithm and
        rate (an inline policy's key).
    :param inline: ``name`` is an inline policy's (``@group``).
    :raises ConfigurationError: if the spec is wrong (the problem ``manage.py
        check`` reports).
    """
    parsed = parse_policy(
        name, spec, addresses=settings.addresses, where=where, inline=inline
    ).parsed()
    assert parsed.identify is not None  # (resolved: parse_policy's default)
    prefix = settings.key_prefix

    def build(text: str) -> Variant:
        """The variant at another rate: each rate of a per-plan policy, or of an override."""
        algorithm = with_blocks(algorithm_at(parsed.spec, text), parsed.blocks)
        return make_variant(algorithm, text, prefix=prefix, name=name, extra=extra)

    rates = None
    if parsed.rate_function is not None:
        rates = PlanRates(parsed.rate_function, parsed.rate_label, build)
    fallback = None
    if parsed.fallback_rate is not None:
        fallback = LocalFallback(
            name, parsed.fallback_rate, get_fallback_store(), fallback_calendar(parsed.spec)
        )
    policy = Policy(
        name,
        with_blocks(parsed.algorithm, parsed.blocks),
        parsed.identify,
        get_backend(settings.connection),
        key_prefix=prefix,
        fail_open=settings.fail_open if parsed.fail_open is None else parsed.fail_open,
        denials=get_deny_cache(),
        rates=rates,
        rate=parsed.rate,
        extra=extra,
        fallback=fallback,
        build=build,
        shadow=parsed.shadow or settings.shadow,
        enforce_percent=parsed.enforce_percent,
    )
    policy.charging = parsed.charging
    policy.gives_back = parsed.charging is not None and parsed.charging.gives_back
    track(policy)
    block_reading.watch(policy)
    return policy


def _no_dropins() -> list[Policy]:
    return []


#: The drop-ins' policies known in this process (``contrib.dropin_policies``,
#: handed over by ``AppConfig.ready``: the drop-ins sit above the registry).
dropin_policies: Callable[[], list[Policy]] = _no_dropins


def use_dropins(listing: Callable[[], list[Policy]]) -> None:
    """Take ``listing()``: the policies the drop-ins know of (never raises)."""
    global dropin_policies
    dropin_policies = listing


def dropin_names() -> list[str]:
    """Return the names of the drop-ins' policies, sorted, each once."""
    return sorted({policy.name for policy in dropin_policies()})


_registered: dict[str, Mapping[str, Any]] = {}
_registering = threading.Lock()


def register_policy(name: str, spec: Mapping[str, Any]) -> None:
    """Define the policy ``name`` in code, as if it were in ``DJANGO_RL["POLICIES"]``.

    For code paths that are not views (a task, a signal handler) and for
    reusable apps that ship their policies. ``spec`` takes the keys of a
    policy in settings; ``key`` and ``rate`` may also be callables. Then
    ``get_policy(name)``, ``@ratelimit(name)``, ``PolicyThrottle``, the admin
    and ``manage.py check`` see it like any other. A policy of the same
    name in settings wins: a project can retune what an app registers.

    What the spec says on its own is judged now (its form, algorithm, rate
    syntax, parameters); dotted paths are imported when the policy is first
    used, and by ``manage.py check``. Registering the same spec again does
    nothing.

    :raises TypeError: if ``name`` is not a string or ``spec`` not a mapping.
    :raises ConfigurationError: if the spec is wrong (the check's message).
    :raises ValueError: if ``name`` is registered already with another spec.
    """
    if not isinstance(name, str):
        raise TypeError(f"register_policy() takes a policy name, not {short_repr(name)}")
    if not isinstance(spec, Mapping):
        raise TypeError(
            f"register_policy({name!r}, ...): the spec must be a dict, not {short_repr(spec)}"
        )
    spec = dict(spec)
    problems = parse_policy(name, spec, where=_code_where(name), resolve=False).problems
    if problems:
        raise problems[0].as_exception()
    with _registering:
        known = _registered.get(name)
        if known is not None and known != spec:
            raise ValueError(
                f"register_policy({name!r}, ...): a policy of that name is registered already, "
                f"with {dict(known)!r}"
            )
        _registered[name] = spec


def unregister_policy(name: str) -> None:
    """Forget the policy ``name`` registered in code, if any (for tests, mostly)."""
    with _registering:
        _registered.pop(name, None)
    get_policy.cache_clear()


def registered_policies() -> dict[str, Mapping[str, Any]]:
    """Return the policies registered in code, by name."""
    with _registering:
        return dict(_registered)


def _code_where(name: str) -> str:
    return f"register_policy({name!r})"


def policy_spec(name: str, settings: Settings | None = None) -> tuple[Mapping[str, Any], str]:
    """Return the spec of the named policy and how messages name it.

    :raises UnknownPolicy: if neither the settings nor code define it.
    """
    settings = settings or get_settings()
    if name in settings.policies:
        return settings.policies[name], f"DJANGO_RL['POLICIES'][{name!r}]"
    spec = _registered.get(name)
    if spec is not None:
        return spec, _code_where(name)
    known = (
        ", ".join(map(short_repr, sorted({*settings.policies, *_registered}, key=short_repr)))
        or "none"
    )
    raise UnknownPolicy(
        f"No rate-limit policy named {short_repr(name)}. Known policies: {known}",
        hint="Define it in settings.DJANGO_RL['POLICIES'] or with django_rl.register_policy().",
    )


#: Definitions replaced for a while (``django_rl.testing.override_policy``), by
#: policy name: a stack of (token, the keys that replace the spec's, the salt of
#: the keys' fingerprint). The newest entry decides.
_replaced: dict[str, list[tuple[object, Mapping[str, Any], str]]] = {}
_replacing = threading.Lock()
_salts = itertools.count(1)


def replace_policy(name: str, keys: Mapping[str, Any]) -> object:
    """Decide the policy ``name`` with ``keys`` in place of its spec's until :func:`restore_policy`.

    The other keys of the spec stay. Its state starts fresh: the keys'
    fingerprint takes a salt of its own (another Redis key for every
    identity), so neither the policy's state before nor that of another
    replacement is read, and the policy's own state is there again after.
    A named policy must exist (settings or ``register_policy``); an inline
    one (``@group``) is replaced wherever it is used. Process-wide (every
    thread); returns the token to give :func:`restore_policy`.

    :raises UnknownPolicy: for a name that is neither defined nor inline.
    :raises ConfigurationError: if the spec with ``keys`` is wrong (the
        replacement is then undone).
    """
    if not name.startswith("@"):
        policy_spec(name)  # raises UnknownPolicy
    token = object()
    salt = f"~override:{os.getpid()}:{next(_salts)}"
    with _replacing:
        _replaced.setdefault(name, []).append((token, dict(keys), salt))
    _forget_built()
    if not name.startswith("@"):
        try:
            get_policy(name)
        except Exception:
            restore_policy(token)
            raise
    return token


def restore_policy(token: object) -> None:
    """Undo the :func:`replace_policy` that returned ``token`` (nothing if undone already)."""
    with _replacing:
        for name, stack in list(_replaced.items()):
            kept = [entry for entry in stack if entry[0] is not token]
            if len(kept) != len(stack):
                if kept:
                    _replaced[name] = kept
                else:
                    del _replaced[name]
                break
        else:
            return
    _forget_built()


def _replacement(name: str) -> tuple[Mapping[str, Any], str] | None:
    """Return the keys and salt replacing ``name``'s spec now, or ``None``."""
    stack = _replaced.get(name)
    if not stack:
        return None
    _, keys, salt = stack[-1]
    return keys, salt


def _forget_built() -> None:
    get_policy.cache_clear()
    inline_policy.cache_clear()


@functools.cache
def get_policy(name: str) -> Policy:
    """Return the policy ``DJANGO_RL["POLICIES"][name]`` (or ``register_policy``) describes.

    Built on first use and kept until the settings change.

    :raises UnknownPolicy: if no policy has that name (the message lists the
        known ones).
    :raises ConfigurationError: if the policy's settings are wrong (the same
        problem ``manage.py check`` reports).
    """
    settings = get_settings()
    spec, where = policy_spec(name, settings)
    replaced = _replacement(name)
    if replaced is None:
        return build_policy(name, spec, settings, where=where)
    keys, salt = replaced
    where = f"override_policy({name!r}, ...) of {where}"
    return build_policy(name, {**spec, **keys}, settings, where=where, extra=salt)


@functools.cache
def inline_policy(spec: InlineSpec) -> Policy:
    """Return the policy of an ``@ratelimit(rate=...)``; equal specs share one.

    :raises ConfigurationError: if a dotted path in it does not import.
    """
    where = f"@ratelimit(group={spec.group!r})"
    replaced = _replacement(spec.name)
    if replaced is None:
        return build_policy(
            spec.name, spec.policy_spec(), get_settings(), where=where, extra=spec.key_text,
            inline=True,
        )  # fmt: skip
    keys, salt = replaced
    return build_policy(
        spec.name,
        {**spec.policy_spec(), **keys},
        get_settings(),
        where=f"override_policy({spec.name!r}, ...) of {where}",
        extra=spec.key_text + salt,
        inline=True,
    )


def policies_named(name: str, *, strict: bool = True) -> list[Policy]:
    """Return the policies that keep state under ``name``.

    One for a named policy; for an inline name (``@group``), one per spec of
    that group (each distinct rate, key or algorithm).

    :param strict: raise for an invalid policy; else leave it out.
    :raises UnknownPolicy: if no policy has that name (with ``strict``).
    :raises ConfigurationError: for an invalid one (with ``strict``).
    """
    if not name.startswith("@") and name in _dropin_names():
        return [policy for policy in dropin_policies() if policy.name == name]
    if not name.startswith("@"):
        try:
            return [get_policy(name)]
        except ConfigurationError:
            if strict:
                raise
            return []
    found = []
    for spec in url_specs():
        if spec.name != name:
            continue
        try:
            found.append(inline_policy(spec))
        except ConfigurationError:
            if strict:
                raise
    # django-ratelimit's drop-in names its policies as inline ones (@group).
    found += [policy for policy in dropin_policies() if policy.name == name]
    if not found and strict:
        raise UnknownPolicy(
            f"No inline policy named {name!r}",
            hint="Inline policies are those of @ratelimit(rate=...) on the URLconf's views.",
        )
    return found


def policy_names() -> list[str]:
    """Return the name of every policy: in settings, in code, inline ones, then the drop-ins'."""
    named = sorted({*get_settings().policies, *registered_policies()})
    inline = sorted({spec.name for spec in url_specs()} - set(named))
    dropins = [name for name in dropin_names() if name not in named and name not in inline]
    return named + inline + dropins


def _dropin_names() -> set[str]:
    """Return the names of the drop-ins' policies (``django_rl.contrib``) not defined otherwise."""
    names = set(dropin_names())
    return names - {*get_settings().policies, *registered_policies()} if names else names


def all_policies() -> list[Policy]:
    """Return every policy that can be built (invalid ones are ``manage.py check``'s)."""
    return [policy for name in policy_names() for policy in policies_named(name, strict=False)]


def fallback_policy_names(alias: str) -> tuple[str, ...]:
    """Return the named policies on ``alias`` that have a ``fallback_rate``, for the log lines.

    Read from the specs, without building a policy; never raises (an invalid
    setting is ``manage.py check``'s to report).
    """
    try:
        settings = get_settings()
        if settings.connection != alias:
            return ()
        specs = {**registered_policies(), **settings.policies}
        return tuple(
            sorted(
                str(name)
                for name, spec in specs.items()
                if isinstance(spec, Mapping) and spec.get("fallback_rate") is not None
            )
        )
    except Exception:  # a log line must never fail a decision
        return ()


def policy_window(name: str) -> int | None:
    """Return the window (``w``) of the named policy's rate; ``None`` if it has no one rate.

    For the headers of a Decision made by hand (``http/headers.py``). Never raises.
    """
    try:
        return quota_window(get_policy(name).algorithm)
    except (ConfigurationError, TypeError):  # made up by hand, or a rate per request
        return None


forget_on_change(get_policy.cache_clear, "DJANGO_RL", "CACHES")
forget_on_change(inline_policy.cache_clear, "DJANGO_RL", "CACHES")


__all__ = [
    "DEGRADED_RETRY_AFTER",
    "Policy",
    "all_policies",
    "build_policy",
    "get_policy",
    "inline_policy",
    "policies_named",
    "policy_name",
    "policy_names",
    "register_policy",
    "registered_policies",
    "replace_policy",
    "restore_policy",
    "unregister_policy",
]
