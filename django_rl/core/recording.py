"""A request's Decisions and ``request.limited``: the one place they are written.

On the request (the Django ``HttpRequest``; a DRF ``Request`` reads through
to it, and records on the one it wraps, so both front doors, the drop-ins
and code that raises ``RateLimited`` share one list):

* ``django_rl_decisions``: every Decision made for it, oldest first;
* ``limited``: ``True`` once any policy has denied it, else ``False`` (a
  policy in shadow mode never sets it).

Both are set as soon as a front door looks at the request, even when no
policy applies (no Decision), so a view can always read them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django_rl.core import installed
from django_rl.core.decision import Decision

#: The attribute of the Django ``HttpRequest`` that holds its Decisions.
REQUEST_ATTRIBUTE = "django_rl_decisions"
#: The attribute that says whether any policy denied the request.
LIMITED = "limited"


def record(request: Any, decisions: Sequence[Decision]) -> list[Decision]:
    """Add ``decisions`` to the request's, set ``request.limited``; return all its Decisions.

    The first call in a process also looks whether ``"django_rl"`` is in
    ``INSTALLED_APPS`` (``installed.py``: one boolean test after that).

    :raises AttributeError: for an object that cannot hold attributes (not a request).
    """
    # Read and written as the instances' own attributes: getattr with a
    # default on a request that lacks one (an HttpRequest has no
    # ``_request``; a new one has neither list nor flag) raises and catches
    # an AttributeError inside, on every decision. (DRF's Request keeps
    # ``_request`` in its own; Django's HttpRequest has no __setattr__.)
    own = request.__dict__
    if "_request" in own:  # DRF's Request: the HttpRequest it wraps holds them
        own = own["_request"].__dict__
    every: list[Decision] | None = own.get(REQUEST_ATTRIBUTE)
    if every is None:  # the request's first: its front door's first look
        if not installed.looked:
            installed.look()
        every = own[REQUEST_ATTRIBUTE] = [*decisions]
    elif decisions:
        every += decisions
    if not own.get(LIMITED):
        for decision in decisions:
            if not decision.allowed and not decision.shadow:  # (Decision.denies)
                own[LIMITED] = True
                break
        else:
            own[LIMITED] = False
    return every


def recorded(request: Any) -> list[Decision]:
    """Return the Decisions recorded on ``request`` so far (empty if none)."""
    http_request = getattr(request, "_request", request)
    return getattr(http_request, REQUEST_ATTRIBUTE, None) or []


def record_missing(request: Any, decisions: Iterable[Decision]) -> list[Decision]:
    """Record those of ``decisions`` that ``request`` does not hold yet; return all.

    For a raised ``RateLimited``: its Decisions may have been recorded by a
    front door already, or made by the view itself.
    """
    known = recorded(request)
    return record(request, [d for d in decisions if not any(d is k for k in known)])
