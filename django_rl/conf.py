"""The one reader of ``settings.DJANGO_RL``.

Settings are read lazily, on first use, and read again after Django sends
``setting_changed`` (``override_settings``, pytest-django's ``settings``
fixture). Nothing copies a setting at import time.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from django.conf import settings as django_settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from django_rl.core.identities import AddressSettings
from django_rl.exceptions import ConfigurationError

#: What ``HEADERS`` may be: the headers a response carries (see headers.py).
HEADER_MODES = ("ietf", "legacy", "both", None)

DEFAULTS: Mapping[str, Any] = {
    "CONNECTION": "default",
    "KEY_PREFIX": "rl",
    "FAIL_OPEN": True,
    "NUM_PROXIES": 0,
    "IP_META_KEY": None,
    "IPV4_PREFIX": 32,
    "IPV6_PREFIX": 64,
    "DEFAULT_POLICY": None,
    "POLICIES": {},
    "HEADERS": "ietf",
    "RATELIMITED_VIEW": None,
    "DENY_CACHE_SIZE": 10_000,
    "DENY_CACHE_MAX_AGE": 60,
    "CLOCK": "server",
    "FALLBACK_MAX_IDENTITIES": 10_000,
    "OVERRIDES": True,
    "SHADOW": False,
    "METRICS": True,
    "HISTORY": True,
    "EXEMPT": (),
    "RULES": (),
    "STATUS_POLICIES": None,
}


@dataclass(frozen=True)
class Settings:
    """``DJANGO_RL`` with defaults filled in and top-level values validated."""

    connection: str
    key_prefix: str
    fail_open: bool
    num_proxies: int
    default_policy: str | None
    policies: Mapping[str, Any]
    headers: str | None = "ietf"
    ratelimited_view: str | None = None
    deny_cache_size: int = DEFAULTS["DENY_CACHE_SIZE"]
    deny_cache_max_age: float = DEFAULTS["DENY_CACHE_MAX_AGE"]
    ip_meta_key: object = None
    ipv4_prefix: int = DEFAULTS["IPV4_PREFIX"]
    ipv6_prefix: int = DEFAULTS["IPV6_PREFIX"]
    #: ``"server"``: decisions go by the Redis server's clock; ``"app"``: by this host's.
    clock: str = "server"

    @property
    def addresses(self) -> AddressSettings:
        """Return how the ``ip`` identity finds and groups client addresses."""
        return AddressSettings(
            self.num_proxies, self.ip_meta_key, self.ipv4_prefix, self.ipv6_prefix
        )

    fallback_max_identities: int = DEFAULTS["FALLBACK_MAX_IDENTITIES"]
    overrides: bool = True
    #: Every policy in shadow mode (counts and decides, never denies).
    shadow: bool = False
    #: Prometheus metrics whenever prometheus_client imports (observability/metrics.py).
    metrics: bool = True
    #: The last hour per policy in Redis, for the admin's charts (observability/history.py).
    history: bool = True
    #: ``EXEMPT`` as written: networks, or a callable (``policies/exempt.py``).
    exempt: object = ()
    #: ``RULES`` as written: paths to policies (``policies/site_rules.py``).
    rules: object = ()
    #: ``STATUS_POLICIES`` as written: the status view's policies (``None``: every one).
    status_policies: object = None


def raw_settings() -> object:
    """Return ``settings.DJANGO_RL`` exactly as the user wrote it (``{}`` when absent)."""
    return getattr(django_settings, "DJANGO_RL", {})


class _Problem(Protocol):
    def as_exception(self) -> ConfigurationError: ...


#: Returns the problems of the settings as written: ``validation.settings_problems``,
#: installed by ``AppConfig.ready`` (``use_validator``), so that settings flow one
#: way (validation reads this module; this module never imports validation).
_validator: Callable[[object], Sequence[_Problem]] | None = None


def use_validator(validator: Callable[[object], Sequence[_Problem]]) -> None:
    """Validate the top level of ``DJANGO_RL`` with ``validator`` from now on."""
    global _validator
    _validator = validator
    get_settings.cache_clear()  # read before the app was ready: validate it now


#: What this process adds to ``KEY_PREFIX`` (:func:`use_key_suffix`); ``""``: nothing.
_key_suffix = ""


def use_key_suffix(suffix: str) -> None:
    """Write and read every key of this process under ``<KEY_PREFIX>:<suffix>`` from now on.

    For pytest-xdist (the pytest plugin, ``django_rl.testing.plugin``): each
    worker keeps its own state under its own prefix (``rl:gw0``, ``rl:gw1``),
    still under ``KEY_PREFIX`` (a least-privilege ACL user's ``~rl:*``
    covers it), whatever ``override_settings`` does to ``DJANGO_RL``.
    Every cache built from the settings is forgotten, as on a change of them.
    ``""`` goes back to ``KEY_PREFIX`` alone.
    """
    global _key_suffix
    _key_suffix = suffix
    _settings_changed(setting="DJANGO_RL")


def key_suffix() -> str:
    """Return what :func:`use_key_suffix` set (``""``: nothing)."""
    return _key_suffix


@functools.cache
def get_settings() -> Settings:
    """Return the validated settings; raise :class:`ConfigurationError` if they are wrong.

    Only the top level is validated here; each policy is validated when it is
    first asked for, so one broken policy does not take the others down.
    ``manage.py check`` reports every problem at once.
    """
    raw = raw_settings()
    if _validator is not None:
        problems = _validator(raw)
        if problems:
            raise problems[0].as_exception()
    if not isinstance(raw, Mapping):
        raise ConfigurationError(
            f"settings.DJANGO_RL must be a dict, not {type(raw).__name__}",
            check_id="django_rl.E001",
        )
    merged = {**DEFAULTS, **raw}
    return Settings(
        connection=merged["CONNECTION"],
        key_prefix=f"{merged['KEY_PREFIX']}:{_key_suffix}" if _key_suffix else merged["KEY_PREFIX"],
        fail_open=merged["FAIL_OPEN"],
        num_proxies=merged["NUM_PROXIES"],
        default_policy=merged["DEFAULT_POLICY"],
        policies=merged["POLICIES"],
        headers=merged["HEADERS"],
        ratelimited_view=merged["RATELIMITED_VIEW"],
        deny_cache_size=merged["DENY_CACHE_SIZE"],
        deny_cache_max_age=merged["DENY_CACHE_MAX_AGE"],
        ip_meta_key=merged["IP_META_KEY"],
        ipv4_prefix=merged["IPV4_PREFIX"],
        ipv6_prefix=merged["IPV6_PREFIX"],
        clock=merged["CLOCK"],
        fallback_max_identities=merged["FALLBACK_MAX_IDENTITIES"],
        overrides=merged["OVERRIDES"],
        shadow=merged["SHADOW"],
        metrics=merged["METRICS"],
        history=merged["HISTORY"],
        exempt=merged["EXEMPT"],
        rules=merged["RULES"],
        status_policies=merged["STATUS_POLICIES"],
    )


F = TypeVar("F", bound=Callable[[], object])

#: The settings generation: bumped whenever Django says a setting django_rl
#: reads changed (``override_settings``, pytest-django's ``settings``). Caches
#: built from settings are forgotten by :func:`forget_on_change`, or compare
#: the generation they were built under with this one.
generation = 0
#: What each cache watches: (forget, names; a name ending in ``*`` is a prefix).
_forgetters: list[tuple[Callable[[], object], tuple[str, ...]]] = []
_forgetting = threading.Lock()


def forget_on_change(forget: F, *settings: str) -> F:
    """Call ``forget()`` whenever one of ``settings`` changes (default ``DJANGO_RL``).

    The one ``setting_changed`` receiver of django_rl calls them, in the
    order they were registered: a module that caches what the settings say
    registers its cache's ``cache_clear`` (or a function) once, at import.
    Returns ``forget``, so it can be used as a decorator.
    """
    with _forgetting:
        _forgetters.append((forget, settings or ("DJANGO_RL",)))
    return forget


def _watches(names: tuple[str, ...], setting: str) -> bool:
    return any(
        setting == name or (name.endswith("*") and setting.startswith(name[:-1])) for name in names
    )


@receiver(setting_changed)
def _settings_changed(*, setting: str, **kwargs: object) -> None:
    global generation
    with _forgetting:
        due = [forget for forget, names in _forgetters if _watches(names, setting)]
        if due:
            generation += 1
    for forget in due:
        forget()


forget_on_change(get_settings.cache_clear)


__all__ = [
    "DEFAULTS",
    "ConfigurationError",
    "Settings",
    "forget_on_change",
    "generation",
    "get_settings",
    "key_suffix",
    "raw_settings",
    "use_key_suffix",
]
