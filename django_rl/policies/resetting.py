"""Forgetting one identity's state under a policy, at every rate, everywhere it is kept."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from redis.exceptions import RedisError

from django_rl.algorithms import StaticAlgorithm
from django_rl.backends import RedisNode
from django_rl.backends.aio_node import apipeline, arun, async_capable
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
        variants, keys = _stateful(policy, identity)
        if not keys:
            return 0
        # An identity's keys share its hash tag: one slot, one node.
        deleted: int = policy.backend.run(keys[0], _delete, variants, keys)
        # After the delete: other processes' deny caches drop what they
        # remembered within reset_epoch.CHECK_INTERVAL (see deny_cache.py).
        reset_epoch.bump()
        return deleted
    except RedisError as exc:
        raise _failed(policy, exc) from exc
    finally:
        _forget_here(policy, identity)


async def areset_identity(policy: Policy, identity: str) -> int:
    """:func:`reset_identity`, its round trips awaited (the same steps and commands).

    :raises BackendError: if Redis cannot answer.
    """
    if not async_capable(policy.backend):  # (a backend without an async path)
        return await sync_to_async(reset_identity, thread_sensitive=False)(policy, identity)
    try:
        variants, keys = _stateful(policy, identity)
        if not keys:
            return 0
        deleted: int = await arun(policy.backend, keys[0], _adelete, variants, keys)
        await reset_epoch.abump()
        return deleted
    except RedisError as exc:
        raise _failed(policy, exc) from exc
    finally:
        _forget_here(policy, identity)


def _failed(policy: Policy, exc: RedisError) -> BackendError:
    return BackendError(f"could not reset policy {policy.name!r}: {exc}")


def _stateful(policy: Policy, identity: str) -> tuple[list[Variant], list[str]]:
    """Return the variants of ``policy`` that keep state, and ``identity``'s key at each."""
    variants = policy.recorded_variants()
    # Static rates (None, "0/<period>") keep no state.
    variants = [v for v in variants if not isinstance(v.algorithm, StaticAlgorithm)]
    return variants, [policy.variant_key(variant, identity) for variant in variants]


def _forget_here(policy: Policy, identity: str) -> None:
    """Forget ``identity`` in this process: its outage fallback count, its deny cache entries."""
    if policy.fallback is not None:
        policy.fallback.forget(identity)
    if policy.denials is not None:
        # After the delete, so a denial another thread got from Redis
        # just before it is forgotten too.
        for variant in policy.variants():
            policy.denials.forget(policy.variant_key(variant, identity))


def _delete(node: RedisNode, first: str, variants: list[Variant], keys: list[str]) -> int:
    _, deleted = node.pipeline(_deletes(node, variants, keys))
    return sum(int(count) for count in deleted)


async def _adelete(node: RedisNode, first: str, variants: list[Variant], keys: list[str]) -> int:
    _, deleted = await apipeline(node, _deletes(node, variants, keys))
    return sum(int(count) for count in deleted)


def _deletes(node: RedisNode, variants: list[Variant], keys: list[str]) -> Callable[[Any], Any]:
    """Return what queues the DELs of the keys' names on a pipeline."""
    names = [
        name
        for variant, key in zip(variants, keys, strict=True)
        for name in variant.algorithm.keys(node, key)
    ]
    # One DEL per key, in one round trip: while a Redis Cluster moves the
    # slot, some keys may still be on the source and others on the target,
    # and a DEL of several would be refused (TRYAGAIN); each key's DEL
    # follows its own redirect instead.
    return lambda pipe: [pipe.delete(name) for name in names]
