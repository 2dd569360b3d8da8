"""A callable named by its dotted path, as settings name key and rate functions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.utils.module_loading import import_string


def import_callable(path: str, named: str, error: type[Exception]) -> Callable[..., Any]:
    """Return the callable at ``path``.

    :param named: how messages name it (``"key 'x.y'"``, ``"rate function 'x.y'"``).
    :raises error: if it does not import or is not callable (the message says which).
    """
    try:
        function = import_string(path)
    except ImportError as exc:
        raise error(f"{named} could not be imported: {exc}") from exc
    if not callable(function):
        raise error(f"{named} is not callable")
    result: Callable[..., Any] = function
    return result
