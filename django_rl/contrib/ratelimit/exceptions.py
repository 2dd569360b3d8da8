"""The exception a blocked request raises, as in django-ratelimit."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied


class Ratelimited(PermissionDenied):
    """A request over its limit with ``block=True``: Django answers 403 unless told otherwise.

    ``RATELIMIT_EXCEPTION_CLASS`` names another class to raise instead;
    ``RatelimitMiddleware`` hands this one to ``RATELIMIT_VIEW``.
    """
