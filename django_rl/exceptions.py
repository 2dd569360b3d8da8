"""The exceptions django_rl raises."""

from __future__ import annotations

from collections.abc import Iterable

from django.core.exceptions import ImproperlyConfigured, PermissionDenied

from django_rl.core.decision import Decision


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


class RateLimited(PermissionDenied):
    """A request was denied by one or more policies; raise it to answer 429.

    ``django_rl.middleware.RateLimitMiddleware`` (plain views) and
    ``django_rl.throttling.exception_handler`` (DRF) turn it into the same 429
    the front doors send, with ``Retry-After`` and the rate-limit headers.
    Without them it is a ``PermissionDenied``: Django answers 403.

    :param decisions: the Decision that denied, or all the Decisions made for
        the request (at least one must deny); all of them are reported in
        the headers.
    :ivar decisions: every Decision given.
    :ivar denied: those that denied.
    :ivar decision: the denying Decision with the longest wait.
    :ivar retry_after: ``Retry-After`` in whole seconds (the longest wait).
    """

    def __init__(self, decisions: Decision | Iterable[Decision]) -> None:
        self.decisions: tuple[Decision, ...] = (
            (decisions,) if isinstance(decisions, Decision) else tuple(decisions)
        )
        # A shadow policy's denial refuses nothing (Decision.denies).
        self.denied = tuple(d for d in self.decisions if d.denies)
        if not self.denied:
            raise ValueError("RateLimited needs at least one Decision that denied")
        self.decision = max(self.denied, key=lambda d: d.retry_after)
        self.retry_after = self.decision.retry_after_header
        names = ", ".join(dict.fromkeys(d.policy for d in self.denied))
        super().__init__(f"Rate limited by {names}: retry after {self.retry_after} s")
