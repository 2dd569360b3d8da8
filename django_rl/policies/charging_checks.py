"""A policy spec's ``count_when``, ``costs`` and ``charge``: parsed once, or its problems.

``spec.py`` asks :func:`charging_of` while it parses a policy; the problems
are what ``manage.py check`` reports (``django_rl.E150`` to ``E153``), and
the first is raised as ``ConfigurationError`` when the policy is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django_rl.algorithms import Algorithm
from django_rl.core.problems import Problem
from django_rl.core.reprs import short_repr
from django_rl.docs_urls import doc_url
from django_rl.policies.charging import (
    CHARGE_HINT,
    COSTS_HINT,
    COUNT_WHEN_HINT,
    OUTCOME_ALGORITHMS,
    WORDS,
    Charging,
    charge_rule,
    costs_rule,
    count_when_rule,
)


def charging_of(
    spec: Mapping[str, Any],
    where: str,
    algorithm: Algorithm | None,
    problems: list[Problem],
    *,
    resolve: bool,
) -> Charging | None:
    """Return what ``spec`` says of charging (``None``: nothing), its problems added.

    :param resolve: import dotted paths; without it, only their form is judged.
    """
    if not {"count_when", "costs", "charge"} & set(spec):
        return None
    count_when = spec.get("count_when")
    costs = spec.get("costs")
    charge = spec.get("charge")
    url = doc_url("settings", "charging-by-outcome")
    if count_when is not None:
        try:
            if resolve or not isinstance(count_when, str) or count_when in WORDS:
                count_when = count_when_rule(count_when, f"{where}['count_when']")
        except (TypeError, ValueError) as exc:
            problems.append(Problem("django_rl.E150", str(exc), f"{COUNT_WHEN_HINT} {url}"))
    if costs is not None:
        try:
            costs = costs_rule(costs, f"{where}['costs']")
        except (TypeError, ValueError) as exc:
            problems.append(Problem("django_rl.E151", str(exc), f"{COSTS_HINT} {url}"))
        else:
            limit = _static_limit(algorithm)
            heavy = {m: c for m, c in costs.items() if limit is not None and c > limit}
            if heavy:
                problems.append(
                    Problem(
                        "django_rl.E151",
                        f"{where}['costs']: {short_repr(heavy)} above the limit {limit}",
                        "A request that costs more than the limit is always denied; lower the "
                        f"cost or raise the rate. {url}",
                    )
                )
    if charge is not None:
        try:
            if resolve or not isinstance(charge, str):
                charge = charge_rule(charge, f"{where}['charge']")
        except (TypeError, ValueError) as exc:
            problems.append(Problem("django_rl.E152", str(exc), f"{CHARGE_HINT} {url}"))
    kind = spec.get("algorithm")
    outcome = (count_when not in (None, "always")) or charge is not None
    if outcome and isinstance(kind, str) and kind not in OUTCOME_ALGORITHMS:
        problems.append(
            Problem(
                "django_rl.E153",
                f"{where}: count_when and charge do not apply to {kind}",
                f"They apply to {', '.join(sorted(OUTCOME_ALGORITHMS))}: a {kind} policy "
                f"holds a request's slots while it runs. Remove them. {url}",
            )
        )
    if not resolve:
        return None
    return Charging(count_when, costs, charge)  # type: ignore[arg-type]  # resolved above


def _static_limit(algorithm: Algorithm | None) -> int | None:
    """Return ``algorithm``'s limit where it is known now (not a static rate), else ``None``."""
    if algorithm is None:
        return None
    limit = getattr(algorithm, "limit", None)
    return limit if isinstance(limit, int) and limit >= 1 else None
