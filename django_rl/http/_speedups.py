"""The HTTP layer's speed-ups: what it does faster than Django's public API would let it.

Audited here, in one file, when Django is upgraded (``tests/http/test_http_speedups.py``
guards each):

* :func:`header_store`: a Django response's header dict, written directly
  (``ResponseHeaders._store``, private): about 4 µs saved per response.
  Checked once at import (:func:`stores_as_expected`), and once per
  response class that its ``__setitem__`` is Django's; any other layout
  falls back to ``response[name] = value``.
* :func:`memoized_values`: the header values of the Decisions last written,
  kept per process, for DRF's path, which writes the same Decisions twice
  (the view's ``headers``, then ``RateLimitMiddleware``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.http.response import HttpResponseBase, ResponseHeaders

from django_rl.core.decision import Decision


def header_store(target: Any) -> dict[str, tuple[str, str]] | None:
    """Return the dict behind ``target.headers`` if they are Django's ``ResponseHeaders``.

    ``HttpResponse.__setitem__`` checks a header (an ASCII name, a Latin-1
    value without a line break) and stores ``(name, value)`` under the name
    in lower case: 4 calls a header, about 1 µs each on a decision's path.
    Our names are ASCII, and each value is checked before it is stored
    directly; a response of another kind (one whose class sets headers its
    own way too), or a Django whose headers are stored otherwise
    (:func:`stores_as_expected`, checked once at import), gets ``target[name] = value``.
    """
    plain = _PLAIN_CLASSES.get(type(target))
    if plain is None:
        plain = _plain_class(type(target))
    if plain:
        headers = getattr(target, "headers", None)
        if type(headers) is ResponseHeaders:
            return headers._store  # (a dict: stores_as_expected)
    return None


#: Whether a class's instances are Django responses whose headers may be
#: stored directly, asked once per class (not per response: a few µs a
#: decision). Bounded: classes made on the fly are asked again.
_PLAIN_CLASSES: dict[type, bool] = {}


def _plain_class(kind: type) -> bool:
    """Return whether ``kind`` sets headers as ``HttpResponseBase`` does (and remember it)."""
    plain = (
        _DIRECT
        and issubclass(kind, HttpResponseBase)
        and kind.__setitem__ is HttpResponseBase.__setitem__
    )
    if len(_PLAIN_CLASSES) >= 256:
        _PLAIN_CLASSES.clear()
    _PLAIN_CLASSES[kind] = plain
    return plain


def stores_as_expected() -> bool:
    """Return whether Django's ``ResponseHeaders`` stores a header as :func:`write_headers` does."""
    try:
        headers = ResponseHeaders({})
        headers["RateLimit"] = '"x";r=1;t=2'
        return getattr(headers, "_store", None) == {"ratelimit": ("RateLimit", '"x";r=1;t=2')}
    except Exception:  # any other shape: write through __setitem__
        return False


_DIRECT = stores_as_expected()


#: The Decisions (kept, so compared by identity), the mode and the headers last written.
_last: tuple[tuple[Decision, ...], str, dict[str, str]] | None = None


def memoized_values(
    decisions: Sequence[Decision],
    mode: str,
    make: Callable[[Sequence[Decision], str], dict[str, str]],
) -> dict[str, str]:
    """Return ``make(decisions, mode)`` (``header_values``), made once for the same Decisions.

    DRF's path writes a request's headers twice: into the view's ``headers``,
    then ``RateLimitMiddleware`` onto the response. The second time the same
    Decision objects come, and get the same values. Not for ``legacy`` and
    ``both``: ``X-RateLimit-Reset`` is read from the clock each time.
    """
    global _last
    last = _last  # one read: other threads may replace it
    if (
        last is not None
        and last[1] == mode
        and len(last[0]) == len(decisions)
        and (
            last[0][0] is decisions[0]
            if len(decisions) == 1
            else all(a is b for a, b in zip(last[0], decisions, strict=True))
        )
    ):
        return last[2]
    values = make(decisions, mode)
    if mode == "ietf":
        _last = (tuple(decisions), mode, values)
    return values


def forget_memo() -> None:
    """Forget the memo of :func:`memoized_values` (the settings changed)."""
    global _last
    _last = None
