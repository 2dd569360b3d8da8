"""Rate-limit response headers, written from the Decisions a request collected.

The front doors only decide: each one records its Decisions on the request
(``core/recording.py``) and hands the response (or, in DRF, the view's ``headers``
dict that ``finalize_response`` copies onto every response) to
:func:`write_headers`. What is written depends on ``DJANGO_RL["HEADERS"]``:

* ``"ietf"`` (default): ``RateLimit-Policy`` and ``RateLimit`` as Structured
  Fields (RFC 9651), following draft-ietf-httpapi-ratelimit-headers-11:
  ``RateLimit-Policy: "login";q=5;w=60`` lists every policy that decided;
  ``RateLimit: "login";r=0;t=42`` reports the one closest to denial.
* ``"legacy"``: ``X-RateLimit-Limit``, ``X-RateLimit-Remaining`` and
  ``X-RateLimit-Reset`` (Unix time in seconds, the way GitHub sends it), for
  the decision closest to denial.
* ``"both"``, or ``None`` for no headers at all.

``t``, the effective window: for a denying decision, the wait until the
request would be allowed (the same whole seconds as ``Retry-After``, so
``Retry-After`` is never earlier than ``t``); for an allowing one, the time
until the state is back to full. Rounded up: within ``t`` seconds the client
can never use more than ``r``.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from django_rl.conf import forget_on_change, get_settings
from django_rl.core.decision import Decision
from django_rl.http._speedups import forget_memo, header_store, memoized_values


class HeaderTarget(Protocol):
    """An ``HttpResponse`` or a plain dict of headers."""

    def __setitem__(self, key: str, value: str, /) -> None: ...


_ceil = math.ceil

#: Set on a response once its headers report that many Decisions.
_WRITTEN_FOR = "_django_rl_headers_for"


def write_headers(target: HeaderTarget, decisions: Sequence[Decision]) -> None:
    """Set the rate-limit headers that ``DJANGO_RL["HEADERS"]`` asks for on ``target``.

    Writing the same Decisions to the same response again is skipped: a
    front door writes them, then ``RateLimitMiddleware`` would write them once
    more. (A request's Decisions only grow, so their count tells.)
    """
    count = len(decisions)
    if not count or getattr(target, _WRITTEN_FOR, None) == count:
        return
    mode = get_settings().headers
    if mode is None:
        return
    if count == 1 and mode == "ietf" and not (decision := decisions[0]).shadow:
        # One Decision, the usual request (in shadow mode: nothing to say):
        # RateLimit-Policy and RateLimit from the parts its policy's values
        # share, written straight in. What header_values makes of it, written
        # out here: this runs on nearly every response.
        policy_value, prefix, direct = _ietf_parts(decision.policy, decision.limit, decision.window)
        rate_value: str | None = None
        if decision.allowed:
            if not decision.degraded or decision.fallback:  # (fail_open: no count to report)
                rate_value = f"{prefix}{decision.remaining};t={_ceil(decision.reset_after)}"
        else:
            rate_value = f"{prefix}{decision.remaining};t={decision.retry_after_header}"
        if type(target) is dict:  # DRF's view.headers
            target["RateLimit-Policy"] = policy_value
            if rate_value is not None:
                target["RateLimit"] = rate_value
            return
        store = header_store(target) if direct else None  # (checked once per policy)
        if store is not None:
            store["ratelimit-policy"] = ("RateLimit-Policy", policy_value)
            if rate_value is not None:
                store["ratelimit"] = ("RateLimit", rate_value)
            target.__dict__[_WRITTEN_FOR] = 1  # (a Django response: see header_store)
            return
    if isinstance(target, dict):  # DRF's view.headers is a plain dict
        target.update(memoized_values(decisions, mode, header_values))
        return
    store = header_store(target)
    for name, value in memoized_values(decisions, mode, header_values).items():
        if store is not None and value.isascii() and "\n" not in value and "\r" not in value:
            # What HttpResponse.__setitem__ stores, its checks made here.
            store[name.lower()] = (name, value)
        else:
            target[name] = value
    setattr(target, _WRITTEN_FOR, count)


def header_values(decisions: Sequence[Decision], mode: str) -> dict[str, str]:
    """Return the rate-limit headers of ``decisions`` in ``mode`` (``"ietf"``, ...).

    A decision that followed ``fail_open`` while Redis could not answer
    (``degraded``) has no count to report: it is listed in
    ``RateLimit-Policy`` but reported in ``RateLimit`` and the legacy set
    only when it denied (``r=0``, ``t`` = its Retry-After). One the outage
    fallback made (``fallback``) has its local count, and is reported like any
    other, with the fallback's limit and window.
    """
    headers: dict[str, str] = {}
    # A policy in shadow mode is not enforced: responses say nothing of it.
    decisions = [d for d in decisions if not d.shadow]
    if not decisions:
        return headers
    reported = [d for d in decisions if d.fallback or not (d.allowed and d.degraded)]
    closest = closest_to_denial(reported) if reported else None
    if mode in ("ietf", "both"):
        items = {d.policy: _policy_item(d.policy, d.limit, d.window) for d in decisions}
        headers["RateLimit-Policy"] = ", ".join(items.values())
        if closest is not None:
            headers["RateLimit"] = (
                f"{_sf_name(closest.policy)};r={closest.remaining};t={effective_window(closest)}"
            )
    if mode in ("legacy", "both") and closest is not None:
        headers["X-RateLimit-Limit"] = str(closest.limit)
        headers["X-RateLimit-Remaining"] = str(closest.remaining)
        headers["X-RateLimit-Reset"] = str(math.ceil(time.time() + _wait(closest)))
    return headers


@functools.lru_cache(maxsize=1024)
def _ietf_parts(name: str, limit: int, window: int | None) -> tuple[str, str, bool]:
    """Return a policy's ``RateLimit-Policy`` value, the start of its ``RateLimit`` one, and
    whether both may be stored without Django's checks (ASCII, no line break).

    Made once per policy (cached until the settings change): only the
    remaining count and ``t`` change from one request to the next.
    """
    policy_value = _policy_item(name, limit, window)
    prefix = _sf_name(name) + ";r="
    both = policy_value + prefix
    return policy_value, prefix, both.isascii() and "\n" not in both and "\r" not in both


def closest_to_denial(decisions: Iterable[Decision]) -> Decision:
    """Return the decision ``RateLimit`` reports: the one nearest to denying.

    A denying decision comes first; among several, or when none denies,
    the one with the fewest hits left, the longer wait (to retry, or to
    recover) breaking a tie.
    """
    # min() by (allowed, remaining, -wait), the first of equals, without a
    # key function's call per Decision: this runs on every request of
    # several policies.
    closest: Decision | None = None
    nearest: tuple[bool, int, float] | None = None
    for d in decisions:
        near = (d.allowed, d.remaining, -(d.reset_after if d.allowed else d.retry_after))
        if nearest is None or near < nearest:
            closest, nearest = d, near
    if closest is None:
        raise ValueError("closest_to_denial() of no Decisions")
    return closest


def effective_window(decision: Decision) -> int:
    """Return ``t`` of ``decision``: its Retry-After when it denied, else seconds to full."""
    if not decision.allowed:
        return decision.retry_after_header
    return math.ceil(decision.reset_after)


def _wait(decision: Decision) -> float:
    return decision.reset_after if decision.allowed else decision.retry_after


def _no_window(name: str) -> int | None:
    return None


#: ``w`` of the policy of that name, for a Decision made by hand (it carries
#: none): the registry's, handed over by ``AppConfig.ready`` (:func:`use_policy_windows`),
#: as the registry sits above this module.
_windows_of_policies: Callable[[str], int | None] = _no_window


def use_policy_windows(window_of: Callable[[str], int | None]) -> None:
    """Take ``window_of(name)``: the window of the named policy, or ``None`` (never raises)."""
    global _windows_of_policies
    _windows_of_policies = window_of
    _policy_item.cache_clear()


@functools.lru_cache(maxsize=1024)
def _policy_item(name: str, limit: int, window: int | None) -> str:
    """Return the ``RateLimit-Policy`` item of a policy (cached until the settings change).

    ``window`` is the Decision's own (its rate's); a Decision made without
    one (by hand) gets the window of the named policy, if there is one.
    """
    item = f"{_sf_string(name)};q={limit}"
    if window is None:
        window = _windows_of_policies(name)
    return item if window is None else f"{item};w={window}"


def _forget_policy_items() -> None:
    _policy_item.cache_clear()
    _ietf_parts.cache_clear()
    forget_memo()


forget_on_change(_forget_policy_items)


@functools.lru_cache(maxsize=1024)
def _sf_name(name: str) -> str:
    """Return a policy's name as a Structured Field String, made once per name."""
    return _sf_string(name)


def _sf_string(text: str) -> str:
    """Serialize ``text`` as a Structured Field String (policy names are ASCII)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
