"""``manage.py check`` for the Channels mixin: consumers name policies that exist (``E140``).

Every class made with ``django_rl.contrib.channels.RateLimitMixin`` is
noted here when it is defined (:data:`CONSUMERS`). The check imports the
module of ``ASGI_APPLICATION`` first (and so the consumers its routing
imports), then reports each name of a consumer's ``connect_policies`` or
``message_policies`` that no policy has, and lists that are not lists of
names. Imports no Channels.
"""

from __future__ import annotations

import weakref
from typing import Any

from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, register
from django.utils.module_loading import import_string

from django_rl.checks.names import SETTINGS_TAG
from django_rl.core.reprs import short_repr
from django_rl.exceptions import UnknownPolicy
from django_rl.policies.registry import policy_names, policy_spec

#: The consumer classes that mix ``RateLimitMixin`` in, as they are defined.
CONSUMERS: weakref.WeakSet[type] = weakref.WeakSet()
#: The attributes that name policies.
ATTRIBUTES = ("connect_policies", "message_policies")


def names_of(consumer: type, attribute: str) -> tuple[str, ...] | None:
    """Return the policy names ``consumer.<attribute>`` holds; ``None`` if not a list of names."""
    value = getattr(consumer, attribute, ())
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        return None
    if not all(isinstance(name, str) for name in value):
        return None
    return tuple(value)


@register(SETTINGS_TAG)
def check_consumers(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Report the consumers' unknown policies (``E140``) and malformed lists (``E141``)."""
    errors: list[CheckMessage] = []
    application = getattr(django_settings, "ASGI_APPLICATION", None)
    if isinstance(application, str) and application:
        try:
            import_string(application)  # imports its routing, and so its consumers
        except Exception as exc:
            errors.append(
                Error(
                    f"ASGI_APPLICATION {application!r} does not import ({type(exc).__name__}: "
                    f"{exc}): its consumers' policies cannot be checked",
                    hint="Point ASGI_APPLICATION at the dotted path of your ASGI application.",
                    id="django_rl.E142",
                )
            )
    for consumer in sorted(CONSUMERS, key=lambda c: f"{c.__module__}.{c.__qualname__}"):
        where = f"{consumer.__module__}.{consumer.__qualname__}"
        for attribute in ATTRIBUTES:
            names = names_of(consumer, attribute)
            if names is None:
                errors.append(
                    Error(
                        f"{where}.{attribute} is {short_repr(getattr(consumer, attribute))}, "
                        "not a list of policy names",
                        hint=f"Write e.g. {attribute} = ['chat_messages'] (a list or tuple of "
                        "names; a bare string is a common slip).",
                        id="django_rl.E141",
                    )
                )
                continue
            for name in names:
                try:
                    policy_spec(name)
                except UnknownPolicy:
                    known = ", ".join(map(short_repr, sorted(policy_names()))) or "none"
                    errors.append(
                        Error(
                            f"{where}.{attribute} names the policy {name!r}, which does not exist",
                            hint=f"Define it in DJANGO_RL['POLICIES'] or with register_policy. "
                            f"Known policies: {known}.",
                            id="django_rl.E140",
                        )
                    )
    return errors


__all__ = ["ATTRIBUTES", "CONSUMERS", "check_consumers", "names_of"]
