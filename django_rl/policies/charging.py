"""Charging by outcome and by method: ``count_when``, ``costs``, a callable ``cost``, ``charge``.

Policy keys (parsed once, ``spec.py``) and ``@ratelimit``'s arguments of the
same names (judged when the decorator is applied); the decorator's win over
the policy's. This module judges the values and answers, per request, what
they say; ``settling.py`` gives back and charges after the response.

* ``count_when``: ``"always"`` (the default), ``"failure"`` (status >= 400,
  or the view raised), ``"success"`` (status < 400), or a callable (or its
  dotted path) ``(request, response) -> bool``.
* ``costs``: HTTP method -> cost (a whole number >= 1); a method not named
  costs ``cost``; ``"GET"`` covers ``HEAD`` unless ``HEAD`` is named.
* ``cost`` (the decorator's): a whole number >= 1, or ``(request) -> int``.
* ``charge``: a callable (or its dotted path) ``(request, response) -> int``,
  points counted after the response on top of the cost.

A callable that raises or answers junk at request time never fails the
request: nothing is given back or charged (a cost callable's request costs
1), and one WARNING per callable and cause goes to logger ``django_rl``.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django_rl.core.dotted import import_callable
from django_rl.core.reprs import short_repr

logger = logging.getLogger("django_rl")

#: The words ``count_when`` takes.
ALWAYS, FAILURE, SUCCESS = "always", "failure", "success"
WORDS = (ALWAYS, FAILURE, SUCCESS)
#: The methods ``costs`` may name: RFC 9110's and PATCH (as ``methods=``).
HTTP_METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}
)
COUNT_WHEN_HINT = (
    "Use 'always' (the default), 'failure' (status >= 400, or the view raised), 'success' "
    "(status < 400), or the dotted path of a callable(request, response) -> bool."
)
COSTS_HINT = (
    "Write a dict of HTTP method to a whole number of at least 1, e.g. "
    "{'GET': 1, 'POST': 5}; other methods cost 1."
)
CHARGE_HINT = (
    "Give the dotted path of a callable(request, response) -> int: the points counted "
    "after the response, on top of the cost (0: none)."
)
#: The algorithms ``count_when`` and ``charge`` apply to (not ``concurrency``).
OUTCOME_ALGORITHMS = frozenset(
    {"fixed_window", "sliding_window", "token_bucket", "gcra", "sliding_log"}
)

CountWhen = str | Callable[[Any, Any], Any]
Charge = Callable[[Any, Any], Any]
Cost = int | Callable[[Any], Any]


def count_when_rule(value: object, named: str) -> CountWhen:
    """Return ``count_when``'s rule: one of :data:`WORDS`, or a callable.

    :raises TypeError: for a value that is neither a string nor callable.
    :raises ValueError: for a string that is no word and does not import.
    """
    if isinstance(value, str):
        if value in WORDS:
            return value
        if "." not in value:
            raise ValueError(
                f"{named} is {short_repr(value)}: not one of {', '.join(WORDS)} nor a dotted path"
            )
        return import_callable(value, f"{named} {value!r}", ValueError)
    if callable(value):
        return value
    raise TypeError(f"{named} is {short_repr(value)}: {COUNT_WHEN_HINT}")


def charge_rule(value: object, named: str) -> Charge:
    """Return ``charge``'s callable.

    :raises TypeError: for a value that is neither a dotted path nor callable.
    :raises ValueError: for a dotted path that does not import.
    """
    if isinstance(value, str):
        return import_callable(value, f"{named} {value!r}", ValueError)
    if callable(value):
        return value
    raise TypeError(f"{named} is {short_repr(value)}: {CHARGE_HINT}")


def costs_rule(value: object, named: str) -> dict[str, int]:
    """Return ``costs`` as a dict of upper-case method to cost (``HEAD`` as ``GET`` if unnamed).

    :raises TypeError: for a value that is not a mapping, a name that is not a
        string, or a cost that is not an ``int`` (a ``bool`` included).
    :raises ValueError: for a name that is no HTTP method, or a cost below 1.
    """
    if not isinstance(value, Mapping):
        raise TypeError(f"{named} is {short_repr(value)}: {COSTS_HINT}")
    costs: dict[str, int] = {}
    for method, cost in value.items():
        if not isinstance(method, str):
            raise TypeError(f"{named}: {short_repr(method)} is not an HTTP method name")
        upper = method.upper()
        if upper not in HTTP_METHODS:
            raise ValueError(
                f"{named}: {method!r} is not an HTTP method; known methods are "
                f"{', '.join(sorted(HTTP_METHODS))}"
            )
        if type(cost) is not int:
            raise TypeError(f"{named}[{method!r}] is {short_repr(cost)}: a cost is an int")
        if cost < 1:
            raise ValueError(f"{named}[{method!r}] is {cost}: a cost is at least 1")
        costs[upper] = cost
    if "GET" in costs and "HEAD" not in costs:
        costs["HEAD"] = costs["GET"]  # Django answers HEAD with the GET view
    return costs


@dataclass(frozen=True)
class Charging:
    """What a policy's spec, or a decorator, says about charging (``None``: not said)."""

    count_when: CountWhen | None = None
    costs: Mapping[str, int] | None = None
    charge: Charge | None = None

    @property
    def after_response(self) -> bool:
        """Return whether anything is left to do after the response (a give-back or a charge)."""
        return (self.count_when is not None and self.count_when != ALWAYS) or (
            self.charge is not None
        )

    @property
    def gives_back(self) -> bool:
        """Return whether ``count_when`` may give a hit back (anything but ``"always"``)."""
        return self.count_when is not None and self.count_when != ALWAYS

    def over(self, policy: Charging | None) -> Charging:
        """Return these arguments (a decorator's) over ``policy``'s own keys."""
        if policy is None:
            return self
        return Charging(
            self.count_when if self.count_when is not None else policy.count_when,
            self.costs if self.costs is not None else policy.costs,
            self.charge if self.charge is not None else policy.charge,
        )


#: Nothing said: every hit counts at the decorator's cost.
NOTHING = Charging()


# -- at request time ----------------------------------------------------------

_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def _label(function: object) -> str:
    module = getattr(function, "__module__", None) or "?"
    return f"{module}.{getattr(function, '__qualname__', type(function).__qualname__)}"


def warn_once(function: object, what: str, cause: str, consequence: str) -> None:
    """Log one WARNING on ``django_rl`` per callable and cause (``what``: its role)."""
    label = _label(function)
    with _warned_lock:
        if (label, cause) in _warned:
            return
        _warned.add((label, cause))
    logger.warning("%s %s %s: %s", what, label, cause, consequence)


def _cause(exc: BaseException) -> str:
    return f"raised {type(exc).__name__}: {exc}"


def _junk(answer: object, wanted: str) -> str:
    """Return the cause of a junk answer (an ``async def``'s coroutine closed, never awaited)."""
    if inspect.iscoroutine(answer):
        answer.close()
        return "is async (returned a coroutine): give a plain function"
    return f"returned {short_repr(answer)}, not {wanted}"


def keeps(rule: CountWhen | None, request: Any, response: Any, raised: bool) -> bool:
    """Return whether the hit stays counted once the response is known.

    A view that raised is a failure; a callable is then not asked (the hit
    stays counted), and one that raises or answers anything but a ``bool``
    keeps it too (logged once per callable and cause).
    """
    if rule is None or rule == ALWAYS:
        return True
    if raised:
        return rule != SUCCESS
    if rule == FAILURE:
        return bool(getattr(response, "status_code", 500) >= 400)
    if rule == SUCCESS:
        return bool(getattr(response, "status_code", 500) < 400)
    assert callable(rule)
    try:
        answer = rule(request, response)
    except Exception as exc:
        warn_once(rule, "count_when", _cause(exc), "the hit stays counted")
        return True
    if type(answer) is not bool:
        cause = _junk(answer, "a bool")
        warn_once(rule, "count_when", cause, "the hit stays counted")
        return True
    return answer


def points(charge: Charge | None, request: Any, response: Any) -> int:
    """Return the points ``charge`` says to count after the response (0: none; junk: 0, logged)."""
    if charge is None:
        return 0
    try:
        answer = charge(request, response)
    except Exception as exc:
        warn_once(charge, "charge", _cause(exc), "nothing charged")
        return 0
    if type(answer) is not int or answer < 0:
        cause = _junk(answer, "a whole number >= 0")
        warn_once(charge, "charge", cause, "nothing charged")
        return 0
    return answer


def cost_of(cost: Cost, costs: Mapping[str, int] | None, request: Any) -> int:
    """Return a request's cost: ``costs`` for its method, else ``cost`` (called if callable)."""
    if costs is not None:
        found = costs.get(getattr(request, "method", None) or "")
        if found is not None:
            return found
    if type(cost) is int:
        return cost
    assert callable(cost)
    try:
        answer = cost(request)
    except Exception as exc:
        warn_once(cost, "cost", _cause(exc), "the request costs 1")
        return 1
    if type(answer) is not int or answer < 1:
        cause = _junk(answer, "a whole number >= 1")
        warn_once(cost, "cost", cause, "the request costs 1")
        return 1
    return answer


# -- the decorator's arguments, judged when it is applied -------------------------


def judge_cost(cost: object) -> Cost:
    """Return ``@ratelimit``'s ``cost``: a whole number of at least 1, or a callable.

    :raises TypeError: for anything else (a ``bool`` or ``float`` included).
    :raises ValueError: for a number below 1.
    """
    if callable(cost) and not isinstance(cost, type):
        return cost
    if type(cost) is not int:  # rules out bool and float
        raise TypeError(
            f"ratelimit(cost={short_repr(cost)}): cost must be a whole number (an int) of at "
            f"least 1, not {type(cost).__name__}"
        )
    if cost < 1:
        raise ValueError(
            f"ratelimit(cost={short_repr(cost)}): cost must be at least 1 (a request that weighs "
            "nothing would never be limited)"
        )
    return cost


def judge_charging(*, count_when: object, costs: object, charge: object) -> Charging:
    """Return ``@ratelimit``'s ``count_when``, ``costs`` and ``charge`` (``NOTHING``: none).

    :raises TypeError, ValueError: for a malformed one (the message names it).
    """
    if count_when is None and costs is None and charge is None:
        return NOTHING
    return Charging(
        None if count_when is None else count_when_rule(count_when, "ratelimit(count_when=...)"),
        None if costs is None else Costs(costs_rule(costs, "ratelimit(costs=...)")),
        None if charge is None else charge_rule(charge, "ratelimit(charge=...)"),
    )


class Costs(dict[str, int]):
    """A ``costs`` mapping that hashes (a ``Limit`` is a key of the request's decided limits)."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))
