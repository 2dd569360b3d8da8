"""Forgetting one identity's state under a policy, at every rate, everywhere it is kept."""

from __future__ import annotations

from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from django_rl.algorithms import StaticAlgorithm
from django_rl.backends import RedisNode
from django_rl.exceptions import BackendError
from django_rl.policies import reset_epoch
from django_rl.policies.plans import Variant

if TYPE_CHECKING:
    from django_rl.policies.policy import Policy


def reset_identity(policy: Policy, identity: str) -> int:
    """Forget ``identity``'s state under ``policy``, at every rate; return the keys deleted.

    See :meth:`Policy.reset`: Redis's keys, this process's deny cache and
    outage fallback count (even when Redis cannot answer), and a new reset
    token for the other processes' deny caches.

    :raises BackendError: if Redis cannot answer.
    """
    try:
        variants = policy.recorded_variants()
        # Static rates (None, "0/<period>") keep no state.
        variants = [v for v in variants if not isinstance(v.algorithm, StaticAlgorithm)]
        keys = [policy.variant_key(variant, identity) for variant in variants]
        if not keys:
            return 0
        # An identity's keys share its hash tag: one slot, one node.
        deleted: int = policy.backend.run(keys[0], _delete, variants, keys)
        # After the delete: other processes' deny caches drop what they
        # remembered within reset_epoch.CHECK_INTERVAL (see deny_cache.py).
        reset_epoch.bump()
        return deleted
    except RedisError as exc:
        raise BackendError(f"could not reset policy {policy.name!r}: {exc}") from exc
    finally:
        if policy.fallback is not None:
            policy.fallback.forget(identity)
        if policy.denials is not None:
            # After the delete, so a denial another thread got from Redis
            # just before it is forgotten too.
            for variant in policy.variants():
                policy.denials.forget(policy.variant_key(variant, identity))


def _delete(node: RedisNode, first: str, variants: list[Variant], keys: list[str]) -> int:
    names = [
        name
        for variant, key in zip(variants, keys, strict=True)
        for name in variant.algorithm.keys(node, key)
    ]
    # One DEL per key, in one round trip: while a Redis Cluster moves the
    # slot, some keys may still be on the source and others on the target,
    # and a DEL of several would be refused (TRYAGAIN); each key's DEL
    # follows its own redirect instead.
    _, deleted = node.pipeline(lambda pipe: [pipe.delete(name) for name in names])
    return sum(int(count) for count in deleted)
