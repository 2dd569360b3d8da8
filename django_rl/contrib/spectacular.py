"""drf-spectacular: the 429s of rate-limited operations in the OpenAPI schema.

Add the hook to drf-spectacular's settings (keep its default hook first)::

    SPECTACULAR_SETTINGS = {
        "POSTPROCESSING_HOOKS": [
            "drf_spectacular.hooks.postprocess_schema_enums",
            "django_rl.contrib.spectacular.postprocess_schema",
        ],
    }

Every operation of a view limited by django_rl then documents a ``429``
response: ``Retry-After`` and the rate-limit headers ``DJANGO_RL["HEADERS"]``
sends (``RateLimit-Policy`` and ``RateLimit`` for ``"ietf"``,
``X-RateLimit-Limit``/``-Remaining``/``-Reset`` for ``"legacy"``, all five for
``"both"``, only ``Retry-After`` for ``None``), each with a ``schema``; its
description names each policy with its rate. A view is limited by:

* ``PolicyThrottle`` among its throttles, naming policies (``throttle_scope``,
  ``throttle_policies``, or ``DEFAULT_POLICY``): every method of the view;
* a throttle of the DRF drop-in (``django_rl.contrib.drf``) with a rate:
  every method;
* ``@ratelimit`` on the view (the class, ``as_view()``'s function, an
  ``@api_view`` function, or a handler through ``method_decorator``): the
  methods it counts (``methods=``; every method without it).

Other operations are left as they are. An operation that documents a 429
already keeps it; the headers it lacks are added.
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Iterable
from typing import Any

from django_rl.conf import get_settings
from django_rl.policies.engine import Limit
from django_rl.policies.registry import Policy, get_policy, inline_policy

logger = logging.getLogger("django_rl")

__all__ = ["postprocess_schema", "rate_limit_headers"]

_RETRY_AFTER = {
    "description": "Seconds to wait before the request would be allowed.",
    "schema": {"type": "integer", "minimum": 0},
}
_IETF = {
    "RateLimit-Policy": {
        "description": (
            "The policies that decided the request, as a Structured Field list "
            "(draft-ietf-httpapi-ratelimit-headers): each policy's name, its quota q "
            "and its window w in seconds."
        ),
        "schema": {"type": "string", "example": '"burst";q=10;w=60'},
    },
    "RateLimit": {
        "description": (
            "The policy nearest to denying the request: r, the requests remaining; "
            "t, seconds until they are available again."
        ),
        "schema": {"type": "string", "example": '"burst";r=0;t=42'},
    },
}
_LEGACY = {
    "X-RateLimit-Limit": {
        "description": "The limit of the policy nearest to denying the request.",
        "schema": {"type": "integer", "minimum": 0},
    },
    "X-RateLimit-Remaining": {
        "description": "Requests remaining under that policy.",
        "schema": {"type": "integer", "minimum": 0},
    },
    "X-RateLimit-Reset": {
        "description": "Unix time in seconds when that policy allows the request again.",
        "schema": {"type": "integer", "minimum": 0},
    },
}
_BODY = {
    "application/json": {
        "schema": {
            "type": "object",
            "properties": {"detail": {"type": "string"}},
        }
    }
}


def rate_limit_headers(mode: str | None = None) -> dict[str, dict[str, Any]]:
    """Return the headers of a 429 under ``HEADERS`` ``mode`` (default: the settings')."""
    if mode is None:
        mode = get_settings().headers
    headers = {"Retry-After": _RETRY_AFTER}
    if mode in ("ietf", "both"):
        headers.update(_IETF)
    if mode in ("legacy", "both"):
        headers.update(_LEGACY)
    return copy.deepcopy(headers)


def postprocess_schema(result: Any, generator: Any, request: Any, public: Any) -> Any:
    """drf-spectacular's postprocessing hook: a 429 on every rate-limited operation."""
    paths = result.get("paths") or {}
    endpoints = getattr(generator, "endpoints", None) or []
    headers = rate_limit_headers()
    for path, path_regex, method, callback in endpoints:
        try:
            view = generator.create_view(callback, method, request)
            operation = _operation(paths, generator.coerce_path(path, method, view), path_regex)
            operation = None if operation is None else operation.get(method.lower())
            if operation is None:
                continue
            limits = list(_limits(callback, view, method))
        except Exception as exc:  # never break the schema for a view that cannot be read
            logger.warning("django_rl: no 429 documented for %s %s: %s", method, path, exc)
            continue
        if limits:
            _document(operation, limits, headers)
    return result


def _operation(paths: dict[str, Any], path: str, path_regex: str) -> Any:
    """Return the schema's path item for ``path``, or the one ``path_regex`` matches."""
    if not path.startswith("/"):
        path = "/" + path
    if path in paths:
        return paths[path]
    try:
        pattern = re.compile(path_regex)
    except (re.error, TypeError):
        return None
    for candidate, item in paths.items():
        concrete = re.sub(r"{[^/}]+}", "1", candidate)
        for tried in (concrete, concrete.lstrip("/")):
            if pattern.match(tried):
                return item
    return None


def _limits(callback: Any, view: Any, method: str) -> Iterable[str]:
    """Yield a line for each policy limiting ``method`` of ``view``: its name and rate."""
    seen: set[str] = set()
    for line in (*_throttle_lines(view), *_decorator_lines(callback, view, method)):
        if line not in seen:
            seen.add(line)
            yield line


def _throttle_lines(view: Any) -> Iterable[str]:
    """The lines of the view's ``PolicyThrottle`` and drop-in throttles (``get_throttles``)."""
    from django_rl.contrib.drf import ScopedRateThrottle, SimpleRateThrottle
    from django_rl.throttling import PolicyThrottle

    for throttle in _throttles(view):
        if isinstance(throttle, PolicyThrottle):
            for name in throttle.get_policy_names(view):
                yield _line_of_name(name)
        elif isinstance(throttle, SimpleRateThrottle):
            if isinstance(throttle, ScopedRateThrottle):
                throttle.scope = getattr(view, type(throttle).scope_attr, None)
                if not throttle.scope:
                    continue
                throttle.rate = throttle.get_rate()
            if throttle.rate is not None:
                yield f"`drf.{throttle.scope}`: {throttle.rate} (sliding_log)"


def _throttles(view: Any) -> list[Any]:
    """Return the view's throttles: its ``get_throttles()`` (which a view may override),
    else one of each of its ``throttle_classes``."""
    try:
        return list(view.get_throttles())
    except Exception:
        found = []
        for cls in getattr(view, "throttle_classes", ()) or ():
            try:
                found.append(cls())
            except Exception:  # e.g. a throttle without a rate: it limits nothing
                continue
        return found


def _decorator_lines(callback: Any, view: Any, method: str) -> Iterable[str]:
    """The lines of ``@ratelimit`` limits of ``view`` that count ``method``."""
    handler = getattr(view, getattr(view, "action", None) or method.lower(), None)
    found: list[Limit] = []
    dispatch = getattr(type(view), "dispatch", None)
    for owner in (callback, type(view), dispatch, handler, *_wrapped_by(handler)):
        for limit in getattr(owner, "django_rl_limits", ()) or ():
            if isinstance(limit, Limit) and limit not in found:
                found.append(limit)
    for limit in found:
        if limit.methods is not None and method.upper() not in limit.methods:
            continue
        for name in limit.names:
            yield _line_of_name(name)
        if limit.inline is not None:
            yield _line_of_policy(inline_policy(limit.inline))


def _wrapped_by(handler: Any) -> list[Any]:
    """Return the functions ``handler`` calls from its closure: ``@api_view``'s handler
    calls the function it was given (``@ratelimit`` below ``@api_view``)."""
    function = getattr(handler, "__func__", handler)
    cells = getattr(function, "__closure__", None) or ()
    found = []
    for cell in cells:
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if callable(value) and getattr(value, "django_rl_limits", None):
            found.append(value)
    return found


def _line_of_name(name: str) -> str:
    try:
        return _line_of_policy(get_policy(name))
    except Exception:
        return f"`{name}`"


def _line_of_policy(policy: Policy) -> str:
    if policy.per_request:
        return f"`{policy.name}`: rate per request, from {policy.rate}"
    return f"`{policy.name}`: {_rate_text(policy)}"


def _rate_text(policy: Policy) -> str:
    algorithm = policy.algorithm
    description = str(getattr(algorithm, "description", ""))
    return description or str(policy.rate)


_INTRO = "Too Many Requests: a rate limit denied the request; retry after Retry-After seconds."


def _document(operation: dict[str, Any], lines: list[str], headers: dict[str, Any]) -> None:
    responses = operation.setdefault("responses", {})
    limits = "Limited by " + "; ".join(lines) + "."
    existing = responses.get("429")
    if existing is None:
        responses["429"] = {
            "description": f"{_INTRO} {limits}",
            "headers": copy.deepcopy(headers),
            "content": copy.deepcopy(_BODY),
        }
        return
    present = existing.setdefault("headers", {})
    for name, header in headers.items():
        present.setdefault(name, copy.deepcopy(header))
    if limits not in existing.get("description", ""):
        existing["description"] = f"{existing.get('description', '')} {limits}".strip()
