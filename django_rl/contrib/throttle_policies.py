"""The policies of a throttle drop-in (DRF's, Django Ninja's): one per scope and rate.

A DRF or Ninja throttle names its limit by a scope (``"anon"``, ``"user"``)
and a rate. Each (scope, rate) is one django_rl
:class:`~django_rl.policies.policy.Policy`, built once per process and kept
until the settings change, so a decision costs a dict lookup here, never a
build. A :class:`ThrottlePolicies` is one drop-in's family of them: the DRF
drop-in's is ``drf`` (``drf_policies.py``), Ninja's ``ninja``
(``ninja_policies.py``).

**Names.** ``<family>.<scope>`` (``drf.anon``, ``ninja.anon``), or
``<family>.x<16 hex>`` for a scope that cannot stand in a key, and
``<family>`` for a throttle that has a ``rate`` but no ``scope``. The
identity is what ``get_cache_key`` returns, so throttles of one name but
different cache keys never share state; the keys' fingerprint holds the rate
and the family, so a changed rate starts fresh and no other family, nor a
policy in ``DJANGO_RL["POLICIES"]`` of the same name, reads this state.

**Algorithm.** ``sliding_log``, the throttles' own (their history list is a
sliding log): the same answers, exact in Redis.

Imports no framework: the admin and ``manage.py ratelimit`` list these
policies in any process.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any

from django_rl.conf import forget_on_change, get_settings
from django_rl.core.keys import SAFE_NAME
from django_rl.core.rates import Rate, RateError, parse_rate
from django_rl.policies.policy import Policy
from django_rl.policies.registry import build_policy

#: The drop-ins' algorithm: DRF's and Ninja's throttles keep a sliding log.
ALGORITHM = "sliding_log"


def _no_identity(request: Any) -> None:
    """The drop-in passes each identity (``get_cache_key``); the policy identifies nothing."""
    return None


class ThrottlePolicies:
    """One drop-in's policies by (scope, limit, period): ``policy_for`` builds each once.

    :param family: the names' first part and the keys' fingerprint extra.
    :param label: how messages name a throttle of it (``"DRF throttle"``).
    """

    def __init__(self, family: str, label: str) -> None:
        self.family = family
        self.label = label
        #: What this process built, until ``DJANGO_RL`` or ``CACHES`` change.
        self.built: dict[tuple[str | None, int, int], Policy] = {}
        self._building = threading.Lock()
        # The policies hold the connection, the key prefix and fail_open.
        forget_on_change(self.forget, "DJANGO_RL", "CACHES")

    def name(self, scope: str | None) -> str:
        """Return the policy name of ``scope``: ``<family>.<scope>``, a digest, or ``<family>``."""
        if not scope:
            return self.family
        name = f"{self.family}.{scope}"
        if SAFE_NAME.fullmatch(name):
            return name
        digest = hashlib.blake2b(str(scope).encode("utf-8", "surrogatepass"), digest_size=8)
        return f"{self.family}.x{digest.hexdigest()}"

    def policy_for(self, scope: str | None, limit: int, period: int) -> Policy:
        """Return the policy of ``scope`` at ``limit`` requests per ``period`` seconds.

        Built on first use and kept until ``DJANGO_RL`` or ``CACHES`` change.

        :raises ConfigurationError: if the rate is beyond what a policy takes.
        """
        found = self.built.get((scope, limit, period))
        if found is not None:
            return found
        with self._building:
            found = self.built.get((scope, limit, period))
            if found is None:
                rate = str(Rate(limit=limit, period_ms=period * 1000))
                spec = {"algorithm": ALGORITHM, "rate": rate, "key": _no_identity}
                found = build_policy(
                    self.name(scope),
                    spec,
                    get_settings(),
                    where=f"{self.label} of scope {scope!r} at {rate!r}",
                    extra=self.family,
                )
                self.built[(scope, limit, period)] = found
        return found

    def add(self, scope: str | None, text: object) -> None:
        """Build the policy of ``scope`` at the rate ``text``, unless it has none or a bad one."""
        if text is None:
            return
        try:
            rate = parse_rate(text)
        except RateError:
            return
        if rate.period_ms % 1000 == 0:
            self.policy_for(scope, rate.limit, rate.period_ms // 1000)

    def forget(self) -> None:
        """Forget every policy built (the settings changed)."""
        with self._building:
            self.built.clear()


__all__ = ["ALGORITHM", "ThrottlePolicies"]
