"""What a policy is, before any decision: its name, its rates and where their state lives.

:class:`PolicyShape` is the configuration half of
:class:`~django_rl.policies.policy.Policy` (which adds the decisions): the
rate (or a rate function and a variant per rate), the rate overrides'
variants, the keys, the rate catalogue, and how the policy answers when
Redis cannot (``fallback``, ``fail_open``); and what a decision on the event
loop awaits of its deny cache and catalogue besides its round trip.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from django_rl.algorithms import Algorithm, ParameterError, Unlimited
from django_rl.algorithms.blocking import Blocking
from django_rl.backends import Backend
from django_rl.backends.aio_node import arunner
from django_rl.core.identities import IdentityFunction
from django_rl.core.keys import safe_identity
from django_rl.core.rates import RateError
from django_rl.core.switches import LIMITS
from django_rl.exceptions import ConfigurationError
from django_rl.policies.block_reading import reading_blocks
from django_rl.policies.catalogue import RateCatalogue
from django_rl.policies.charging import Charging
from django_rl.policies.deny_cache import DenyCache
from django_rl.policies.fallback import LocalFallback
from django_rl.policies.override_rates import OverrideRates
from django_rl.policies.plans import PlanRates, Variant, is_rate_function, make_variant

if TYPE_CHECKING:
    from django_rl.algorithms import Outcome
    from django_rl.policies.pending import Pending


class PolicyShape:
    """A policy's configuration: see :class:`~django_rl.policies.policy.Policy`."""

    def __init__(
        self,
        name: str,
        algorithm: Algorithm | None,
        identify: IdentityFunction,
        backend: Backend,
        *,
        key_prefix: str,
        fail_open: bool,
        denials: DenyCache | None = None,
        rates: PlanRates | None = None,
        rate: str = "",
        extra: str = "",
        fallback: LocalFallback | None = None,
        build: Callable[[str], Variant] | None = None,
        shadow: bool = False,
        enforce_percent: float = 100.0,
    ) -> None:
        self.name = name
        #: Shadow mode: decide and count as usual, never deny (``Decision.shadow``).
        self.shadow = shadow
        #: The share of identities enforced (``rollout.py``); the others are shadow.
        self.enforce_percent = enforce_percent
        #: Whether ``enforce_percent`` or an override of it may shadow an identity:
        #: ``rollout.outside`` is asked only then (kept by ``rollout.track``).
        self.partial = enforce_percent < 100
        self.identify: IdentityFunction = identify
        self.backend = backend
        #: What ``Policy.aask`` awaits the algorithm's hit with (``aio_node.arunner``;
        #: ``None``: the backend has no async path).
        self._arun = arunner(backend)
        self.key_prefix = key_prefix
        self.fail_open = fail_open
        self.denials = denials
        self.rates = rates
        self.fallback = fallback
        self._variant: Variant | None = None
        self._overrides = OverrideRates(name, build, rates)
        self._catalogue = None if rates is None else RateCatalogue(backend, key_prefix, name, rates)
        if algorithm is not None:
            text = rate or str(getattr(algorithm, "rate", ""))
            self._variant = make_variant(algorithm, text, prefix=key_prefix, name=name, extra=extra)
        elif rates is None:
            raise TypeError("a Policy needs an algorithm, or rates chosen per request")
        #: ``count_when``, ``costs``, ``charge`` of the spec (``charging.py``), or ``None``.
        self.charging: Charging | None = None
        #: Its ``count_when`` gives hits back: the deny cache remembers only blocks of it
        #: (a give-back may end a denial before its time).
        self.gives_back = False
        #: ``rate: None``: the front doors skip the policy (:meth:`hit_request`).
        self.limits_nothing = isinstance(algorithm, Unlimited)
        #: Its decisions read identities' blocks (``block_for``/``escalate``, or
        #: :meth:`read_blocks`); ``False`` may still mean blocks with a static rate.
        self.reads_blocks = isinstance(algorithm, Blocking)

    def __repr__(self) -> str:
        if self._variant is None:
            return f"<Policy {self.name!r}: rate per request from {self.rate}>"
        return f"<Policy {self.name!r}: {self._variant.algorithm.description}>"

    def read_blocks(self) -> None:
        """From now on, decide with the identities' blocks read (``block_reading.py``).

        For a policy without ``block_for`` or ``escalate`` whose identity code
        blocks: every rate (its own, per-plan, overrides') switches, as if it
        had ``block_for`` without ever starting a block. Idempotent, thread-safe
        (a decision under way finishes at the rate it took).
        """
        if self.reads_blocks:
            return
        self.reads_blocks = True
        if self._variant is not None:
            self._variant = reading_blocks(self._variant)
        self._overrides.adapt(reading_blocks)
        if self.rates is not None:
            self.rates.adapt(reading_blocks)

    @property
    def rate(self) -> str:
        """Return the rate as configured: a rate string, or the rate function's name."""
        if self.rates is not None:
            return self.rates.label
        return self._one_rate().rate

    @property
    def per_request(self) -> bool:
        """Return whether the rate is chosen per request (per-plan rates)."""
        return self._variant is None

    @property
    def algorithm(self) -> Algorithm:
        """Return the algorithm at the policy's rate (not for per-plan rates)."""
        return self._one_rate().algorithm

    @property
    def limit(self) -> int:
        """Return the most hits of cost 1 allowed at once (not for per-plan rates)."""
        return self._one_rate().limit

    @property
    def fingerprint(self) -> str:
        """Return the fingerprint of the policy's keys (not for per-plan rates)."""
        return self._one_rate().fingerprint

    def _one_rate(self) -> Variant:
        if self._variant is None:
            raise TypeError(
                f"policy {self.name!r} takes its rate from {self.rate} per request: it has "
                "an algorithm, limit and keys per rate (see Policy.variants())"
            )
        return self._variant

    def key(self, identity: str) -> str:
        """Return the base Redis key of ``identity`` under this policy (not for per-plan rates)."""
        return self.variant_key(self._one_rate(), identity)

    def variant_key(self, variant: Variant, identity: str) -> str:
        """Return the base Redis key of ``identity`` at one of the policy's rates."""
        return variant.key_head + safe_identity(identity) + variant.key_tail

    def variants(self) -> list[Variant]:
        """Return the rates this process knows: the one rate, or those decided at so far.

        Also the rates of the policy's rate overrides now in force, and of
        those this process decided at.
        """
        overridden = self._overrides.in_force()
        if self.rates is not None:
            return self.rates.known()  # (a per-plan policy's overrides are among its rates)
        found = {self._one_rate().fingerprint: self._one_rate()}
        for variant in overridden:
            found.setdefault(variant.fingerprint, variant)
        return list(found.values())

    def recorded_variants(self) -> list[Variant]:
        """Return every rate whose state may exist: the catalogue's and this process's.

        :raises redis.exceptions.RedisError: if Redis cannot answer (per-plan rates).
        """
        if self._catalogue is None:
            return self.variants()
        return self._catalogue.variants(self.variants())

    def note_rate(self, variant: Variant) -> None:
        """Record ``variant``'s rate in the rate catalogue when it is due (per-plan policies).

        For callers that count through ``backend.run`` themselves (the
        django-ratelimit drop-in), so that other processes (the admin,
        ``manage.py ratelimit``) can read their state as :meth:`hit` leaves it.
        """
        if self._catalogue is not None:
            self._catalogue.record_if_due(variant)

    # -- what a decision on the event loop awaits besides its round trip ---

    def abefore_answer(self, pending: Pending, outcome: Outcome) -> Awaitable[None] | None:
        """Return what to await before :meth:`answered` on the loop: the round trips it
        would block on (the deny cache's baseline token, the catalogue); ``None``
        when there are none, the usual case (no coroutine made, none to resume)."""
        baseline = self.denials is not None and pending.asked_at and not outcome[0]
        if not baseline and self._catalogue is None:
            return None
        return self._abefore_answer(pending, bool(baseline))

    async def _abefore_answer(self, pending: Pending, baseline: bool) -> None:
        if baseline:
            assert self.denials is not None
            await self.denials.abaseline()
        if self._catalogue is not None:
            await self._catalogue.arecord_if_due(pending.variant)

    def aready(self) -> Awaitable[None] | None:
        """Return what to await before :meth:`_decide` on the loop: the deny cache's
        token read, when due; ``None`` otherwise (the usual case: nothing made)."""
        denials = self.denials
        if denials is None or LIMITS.off:
            return None
        return denials.aready()

    def override_variant(self, rate: str) -> Variant:
        """Return the variant of a rate override's ``rate``, built once per process.

        :raises RateError, ParameterError: if ``rate`` does not make a valid policy.
        :raises TypeError: for a policy made without ``build`` (by hand).
        """
        return self._overrides.variant(rate)

    def variant_for(self, request: Any) -> Variant | None:
        """Return the variant that applies to ``request``; ``None`` when no rate does.

        :raises ConfigurationError: if the rate function returns something that
            is not a valid rate (``django_rl.E007``).
        """
        if self._variant is not None:
            return self._variant
        assert self.rates is not None
        rate = self.rates.rate_for(request)
        if rate is None:
            return None
        if not isinstance(rate, str) or is_rate_function(rate):
            raise self._bad_rate(rate, "it must return a rate string such as '100/h', or None")
        try:
            return self.rates.variant(rate)
        except (RateError, ParameterError) as exc:
            raise self._bad_rate(rate, str(exc)) from exc

    def _bad_rate(self, rate: object, why: str) -> ConfigurationError:
        return ConfigurationError(
            f"rate function {self.rate} of policy {self.name!r} returned {rate!r}: {why}",
            check_id="django_rl.E007",
            hint="Return '<count>/<period>' (e.g. '100/h') or None (no limit for that request).",
        )
