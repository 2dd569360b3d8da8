"""The rate catalogue of a per-plan policy in Redis: which rate each fingerprint is.

See ``plans.py`` for why it exists. Read by whoever reads a per-plan
policy's state (the admin, ``reset``), written by the processes that decide
(once per rate, process and day: :meth:`PlanRates.due`).
"""

from __future__ import annotations

from redis.exceptions import RedisError

from django_rl.algorithms import ParameterError
from django_rl.backends import Backend, RedisNode
from django_rl.backends.aio_node import arun, async_capable, atransaction
from django_rl.core.rates import RateError
from django_rl.policies.plans import CATALOGUE_TTL_MS, PlanRates, Variant, catalogue_key


class RateCatalogue:
    """The catalogue of one per-plan policy: ``<prefix>:~rates:<policy>``."""

    def __init__(self, backend: Backend, key_prefix: str, name: str, rates: PlanRates) -> None:
        self.backend = backend
        self.key = catalogue_key(key_prefix, name)
        self.rates = rates

    def record_if_due(self, variant: Variant) -> None:
        """Write ``variant``'s rate when its entry is due; a failure is tried again in seconds."""
        if not self.rates.due(variant):
            return
        try:
            self.backend.run(self.key, _write, variant.fingerprint, variant.rate)
        except RedisError:
            self.rates.recorded(variant, ok=False)  # tried again in a few seconds
            return
        self.rates.recorded(variant, ok=True)

    async def arecord_if_due(self, variant: Variant) -> None:
        """:meth:`record_if_due` on the event loop (the same MULTI/EXEC, awaited)."""
        if not self.rates.due(variant) or not async_capable(self.backend):
            return  # (a cluster: record_if_due, in the decision's answer)
        try:
            await arun(self.backend, self.key, _awrite, variant.fingerprint, variant.rate)
        except RedisError:
            self.rates.recorded(variant, ok=False)
            return
        self.rates.recorded(variant, ok=True)

    def variants(self, known: list[Variant]) -> list[Variant]:
        """Return ``known`` and every rate of the catalogue whose state may exist.

        A catalogue entry of an earlier configuration (another fingerprint for
        the rate now) is left out: no decision reads its state.

        :raises redis.exceptions.RedisError: if Redis cannot answer.
        """
        entries = self.backend.run(self.key, _read)
        found = {v.fingerprint: v for v in known}
        for fingerprint, rate in entries.items():
            if fingerprint in found:
                continue
            try:
                variant = self.rates.variant(rate)
            except (RateError, ParameterError):
                continue
            if variant.fingerprint == fingerprint:
                found[fingerprint] = variant
        return list(found.values())


def _read(node: RedisNode, key: str) -> dict[str, str]:
    entries = node.client.hgetall(key)
    return {_text(k): _text(v) for k, v in entries.items()}


def _write(node: RedisNode, key: str, fingerprint: str, rate: str) -> None:
    node.client.transaction_replies(_entry(key, fingerprint, rate))


async def _awrite(node: RedisNode, key: str, fingerprint: str, rate: str) -> None:
    await atransaction(node, _entry(key, fingerprint, rate))


def _entry(key: str, fingerprint: str, rate: str) -> tuple[tuple[object, ...], ...]:
    # Every writer sets the same long TTL, so no write shortens another's.
    return (("HSET", key, fingerprint, rate), ("PEXPIRE", key, CATALOGUE_TTL_MS))


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
