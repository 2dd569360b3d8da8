"""The speed-ups of ``observability/`` that rely on how ``prometheus_client`` lays its objects out.

One place to audit when ``prometheus_client`` is upgraded: each speed-up
says what layout it relies on, checks that layout before using it, and
falls back to the public API, slower and with the same result, when the
layout is not as expected. ``tests/core/test_speedups.py`` fails loudly when the
installed ``prometheus_client`` no longer has the layout (so the fallback
is never used unnoticed) and proves each fallback right.

* :func:`histogram_adder`: adds a batch of observations, already counted
  per bucket, to a ``Histogram`` with one ``inc`` per bucket and one for
  the sum, through the histogram's own per-bucket values (``_buckets``,
  ``_sum``, ``_upper_bounds``: ``prometheus_client`` 0.20 to 0.26 at
  least). The public way is an ``observe`` per observation: a lock, a
  search of the bounds and two adds each (a write to a memory-mapped file
  each, in multiprocess mode).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

#: ``add(counts, total)``: ``counts[i]`` observations in bucket ``i`` (the
#: last: above every bound, ``+Inf``), whose values add up to ``total``.
Adder = Callable[[Sequence[int], float], None]


def histogram_adder(histogram: Any, bounds: Sequence[float]) -> Adder:
    """Return how to add observations counted per bucket of ``bounds`` to ``histogram``.

    ``histogram`` is a ``prometheus_client.Histogram`` without labels whose
    buckets are ``bounds`` (then ``+Inf``). Where it is laid out as
    :func:`has_bucket_values` expects: one ``inc`` per bucket and one for
    the sum. Otherwise the public ``observe``, once per observation
    (:func:`observe_each`).
    """
    if has_bucket_values(histogram, bounds):
        buckets, total_value = histogram._buckets, histogram._sum

        def add(counts: Sequence[int], total: float) -> None:
            total_value.inc(total)
            for bucket, count in zip(buckets, counts, strict=True):
                if count:
                    bucket.inc(count)

        return add

    def observe(counts: Sequence[int], total: float) -> None:
        observe_each(histogram, bounds, counts, total)

    return observe


def has_bucket_values(histogram: Any, bounds: Sequence[float]) -> bool:
    """Return whether ``histogram`` has a value per bucket of ``bounds`` to add to directly.

    That is ``prometheus_client``'s layout: ``_upper_bounds`` is ``bounds``
    then ``+Inf``; ``_buckets`` a list of as many values, each counting the
    observations of its own bucket only (the exposition adds them up), each
    with ``inc``; ``_sum`` a value with ``inc``.
    """
    upper = getattr(histogram, "_upper_bounds", None)
    buckets = getattr(histogram, "_buckets", None)
    total = getattr(histogram, "_sum", None)
    if not isinstance(upper, list) or upper != [*bounds, math.inf]:
        return False
    if not isinstance(buckets, list) or len(buckets) != len(upper):
        return False
    return all(callable(getattr(value, "inc", None)) for value in [*buckets, total])


def observe_each(
    histogram: Any, bounds: Sequence[float], counts: Sequence[int], total: float
) -> None:
    """Observe ``counts[i]`` values in each bucket ``i``, adding up to ``total``; public API only.

    Each bucket's count stays exact (each value is inside its bucket:
    above the bound below it, at most its own) and so does the sum, up to
    rounding, wherever ``total`` can be made of values in those buckets
    (it always can, for the observations ``counts`` were counted from): the
    finite buckets' values sit at one same share of the way through each
    bucket; with observations above the last bound, the finite ones sit
    just above their lower bounds and those above take the rest.
    """
    lows = [0.0, *bounds[:-1]]  # each finite bucket's lower bound; latencies are >= 0
    finite, beyond = counts[:-1], counts[-1]
    if beyond:
        values = [math.nextafter(low, math.inf) for low in lows]
        rest = total - sum(c * v for c, v in zip(finite, values, strict=True))
        values.append(max(rest / beyond, math.nextafter(bounds[-1], math.inf)))
    else:
        low = sum(c * lo for c, lo in zip(finite, lows, strict=True))
        high = sum(c * hi for c, hi in zip(finite, bounds, strict=True))
        share = 0.0 if high <= low else min(1.0, max(0.0, (total - low) / (high - low)))
        values = [
            min(hi, max(math.nextafter(lo, math.inf), lo + share * (hi - lo)))
            for lo, hi in zip(lows, bounds, strict=True)
        ]
        values.append(math.inf)  # no observation above the last bound
    for count, value in zip(counts, values, strict=True):
        for _ in range(count):
            histogram.observe(value)
