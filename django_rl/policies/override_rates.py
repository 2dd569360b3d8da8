"""The variants of a policy's rate overrides (set in the admin), built once per process.

A rate override decides an identity at another rate, with the policy's own
algorithm and parameters: like each rate of a per-plan policy, it keeps its
own state (its own fingerprint). An override whose rate cannot make a valid
policy (the admin's form refuses such rates; one may come from an older
release or the database by hand) is logged once and ignored: the policy's
own rate decides.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from django_rl.algorithms import ParameterError
from django_rl.core.rates import RateError
from django_rl.overrides.loader import rules_for
from django_rl.policies.plans import PlanRates, Variant

logger = logging.getLogger("django_rl")


class OverrideRates:
    """The rates overrides of one policy ask for: a variant per rate, and the rates that make none.

    :param build: makes the variant of a rate (the registry's; ``None`` for a
        policy made by hand, which has one rate only).
    :param plans: a per-plan policy's rates, whose variants overrides share.
    """

    def __init__(
        self, name: str, build: Callable[[str], Variant] | None, plans: PlanRates | None
    ) -> None:
        self.name = name
        self._build = build
        self._plans = plans
        self._variants: dict[str, Variant] = {}
        self._bad: set[str] = set()

    def variant(self, rate: str) -> Variant:
        """Return the variant of ``rate``, built once per process.

        :raises RateError, ParameterError: if ``rate`` does not make a valid policy.
        :raises TypeError: for a policy made without ``build`` (by hand).
        """
        found = self._variants.get(rate)
        if found is not None:
            return found
        if self._plans is not None:
            built = self._plans.variant(rate)
        elif self._build is not None:
            built = self._build(rate)
        else:
            raise TypeError(f"policy {self.name!r} was made without build=: it has one rate")
        return self._variants.setdefault(rate, built)

    def adapt(self, change: Callable[[Variant], Variant]) -> None:
        """Make every variant, built and to come, ``change(variant)`` (``Policy.read_blocks``)."""
        build = self._build
        if build is not None:
            self._build = lambda rate: change(build(rate))
        self._variants = {rate: change(each) for rate, each in self._variants.items()}

    def usable(self, rate: str) -> Variant | None:
        """Return the variant of ``rate``, or ``None`` (logged once) if it cannot be made."""
        found = self._variants.get(rate)
        if found is not None:
            return found
        if rate in self._bad:
            return None
        try:
            return self.variant(rate)
        except (RateError, ParameterError, TypeError) as exc:
            self._bad.add(rate)
            _log_bad_override(self.name, rate, str(exc))
            return None

    def in_force(self) -> list[Variant]:
        """Return the variants of the overrides in force now, and of those decided at before."""
        rules = rules_for(self.name)
        if rules is not None:
            for rate in rules.rates():
                self.usable(rate)
        return list(self._variants.values())


@functools.cache
def _log_bad_override(name: str, rate: str, why: str) -> None:
    """Log, once per process, that a rate override of policy ``name`` cannot apply."""
    logger.error(
        "A rate override of rate-limit policy %r at %r cannot apply (%s); the policy's own "
        "rate decides instead. Change the override in the admin.",
        name,
        rate,
        why,
    )
