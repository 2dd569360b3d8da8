"""The exceptions django_rl raises."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured


class ConfigurationError(ImproperlyConfigured):
    """``settings.DJANGO_RL`` is wrong; ``check_id`` names the system check that reports it."""

    def __init__(self, message: str, *, check_id: str = "", hint: str = "") -> None:
        self.check_id = check_id
        self.hint = hint
        text = f"{message} ({check_id})" if check_id else message
        super().__init__(f"{text}. {hint}" if hint else text)


class UnknownPolicy(ConfigurationError):
    """A policy name was asked for that ``DJANGO_RL["POLICIES"]`` does not define."""


class BackendError(Exception):
    """Redis could not answer a read or an admin operation (``peek``, ``reset``).

    ``hit`` never raises it: a decision made while Redis is down follows
    ``FAIL_OPEN`` instead. The original redis-py error is the ``__cause__``.
    """
