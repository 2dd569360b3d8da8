"""Code that runs in child processes started by the tests (multiprocessing, spawn).

A spawned child imports nothing of the parent's state, so it sets Django up
itself, pointed at the same redis-server and the same policies.
"""

from __future__ import annotations

import os
import time
from typing import Any


def hammer_policy(
    redis_url: str,
    policies: dict[str, Any],
    name: str,
    identity: str,
    attempts: int,
    cost: int,
    ready: Any,
    go: Any,
    results: Any,
) -> None:
    """Hit ``name`` for ``identity`` ``attempts`` times once ``go`` is set; report allowed count."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.sites.settings"
    import django

    django.setup()
    from django.test import override_settings

    from django_rl import get_policy
    from tests.support.redis_server import caches_for

    with override_settings(CACHES=caches_for(redis_url), DJANGO_RL={"POLICIES": policies}):
        policy = get_policy(name)
        policy.peek("warm-up")  # connect and measure the clock before the race
        ready.set()
        go.wait(30)
        allowed = sum(policy.hit(identity, cost).allowed for _ in range(attempts))
    results.put(allowed)


#: The inline policy the exactness suite hits by the name ``"inline"``.
INLINE = ("exact", "fixed_window", "100/h", "ip")


def policy_and_hit(name: str) -> tuple[Any, Any]:
    """Return the policy the exactness suite calls ``name``, and ``hit(identity, cost)`` of it.

    ``"inline"`` is the inline policy of :data:`INLINE` (as ``@ratelimit(rate=...)``
    makes it); a per-plan policy is hit with a request, whose rate its rate
    function gives; the others are named policies.
    """
    import functools

    from django.test import RequestFactory

    from django_rl.policies.inline import InlineSpec
    from django_rl.policies.registry import get_policy, inline_policy

    if TOGETHER in name:
        return together_and_hit(name)

    policy = inline_policy(InlineSpec(*INLINE)) if name == "inline" else get_policy(name)
    if policy.per_request:
        request = RequestFactory().get("/")
        return policy, functools.partial(policy.hit, request=request)
    return policy, policy.hit


#: Joins the names of policies hit together (``hit_many``) into one name.
TOGETHER = "+"
#: Begins such a name when each policy is hit on an identity of its own.
ACROSS = "across:"


def together_and_hit(name: str) -> tuple[Any, Any]:
    """Return the first policy of ``"a+b+..."`` and ``hit(identity, cost)`` of them all together.

    The hit is allowed when every policy allowed it (``hit_many``: all or
    nothing), each on ``identity``; with the prefix :data:`ACROSS`, the
    second policy on ``identity/1``, the third on ``identity/2``...: other
    hash tags, so other cluster slots.
    """
    from types import SimpleNamespace

    from django_rl import hit_many
    from django_rl.policies.registry import get_policy

    across = name.startswith(ACROSS)
    policies = [get_policy(part) for part in name.removeprefix(ACROSS).split(TOGETHER)]

    def hit(identity: str, cost: int) -> Any:
        decisions = hit_many(
            [
                (policy, f"{identity}/{i}" if across and i else identity, cost)
                for i, policy in enumerate(policies)
            ]
        )
        return SimpleNamespace(allowed=all(d.allowed for d in decisions))

    return policies[0], hit


def peek(policy: Any, identity: str) -> Any:
    """Return ``policy.peek(identity)``, with a request for a per-plan policy."""
    from django.test import RequestFactory

    return policy.peek(identity, request=RequestFactory().get("/"))


def serve_rounds(
    caches: dict[str, Any],
    policies: dict[str, Any],
    tasks: Any,
    results: Any,
    start: Any,
) -> None:
    """Hit policies in rounds, one per task, until a ``None`` task.

    Policies are named as :func:`policy_and_hit` names them.

    Reports ``(allowed hits, wall-clock start, end)`` of each round. ``caches``
    is the CACHES setting to use (any topology).

    A task is ``(policy name, identity, attempts, cost)``. Every round waits
    on ``start``, a barrier shared with the other processes and the parent's
    threads, so all of them hit the identity at once. The process stays up
    between rounds: spawning one costs more than a round.
    """
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.sites.settings"
    import django

    django.setup()
    from django.test import override_settings

    with override_settings(CACHES=caches, DJANGO_RL={"POLICIES": policies}):
        for name in (*policies, "inline"):
            # Connect, measure the clock, load the script.
            peek(policy_and_hit(name)[0], "warm-up")
        results.put("ready")
        while (task := tasks.get()) is not None:
            name, identity, attempts, cost = task
            _, hit = policy_and_hit(name)
            start.wait(60)
            began = time.time()
            allowed = sum(hit(identity, cost).allowed for _ in range(attempts))
            results.put((allowed, began, time.time()))


def hit_through_an_outage(
    dead_url: str,
    policies: dict[str, Any],
    name: str,
    identity: str,
    attempts: int,
    ready: Any,
    go: Any,
    results: Any,
) -> None:
    """Hit ``name`` for ``identity`` while its Redis (``dead_url``) cannot answer; report counts.

    Every decision is the outage fallback's: reports ``(allowed, fallback
    decisions)``.
    """
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.sites.settings"
    import django

    django.setup()
    from django.test import override_settings

    from django_rl import get_policy
    from tests.support.redis_server import caches_for

    caches = caches_for(dead_url, SOCKET_CONNECT_TIMEOUT=0.2, SOCKET_TIMEOUT=0.2)
    with override_settings(CACHES=caches, DJANGO_RL={"POLICIES": policies}):
        policy = get_policy(name)
        ready.set()
        go.wait(60)
        decisions = [policy.hit(identity) for _ in range(attempts)]
    results.put((sum(d.allowed for d in decisions), sum(d.fallback for d in decisions)))


#: The DRF drop-in's throttle of the exactness suite: DRF's AnonRateThrottle
#: at a rate of its own, as a project writes one.
DRF_RATE = "100/hour"


def drf_throttle_and_allow() -> Any:
    """Return ``allow(address) -> bool``: a new drop-in throttle per request, as DRF makes them."""
    from rest_framework.request import Request
    from rest_framework.test import APIRequestFactory

    from django_rl.contrib.drf import AnonRateThrottle

    throttle = type("Exact", (AnonRateThrottle,), {"rate": DRF_RATE, "scope": "exact"})
    factory = APIRequestFactory()

    def allow(address: str) -> bool:
        request = Request(factory.get("/", REMOTE_ADDR=address))
        return bool(throttle().allow_request(request, None))

    return allow


def serve_drf_rounds(caches: dict[str, Any], tasks: Any, results: Any, start: Any) -> None:
    """As :func:`serve_rounds`, through the DRF drop-in: a task is ``(address, attempts)``."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.sites.settings"
    import django

    django.setup()
    from django.test import override_settings

    with override_settings(CACHES=caches, DJANGO_RL={}):
        allow = drf_throttle_and_allow()
        allow("192.0.2.254")  # connect, measure the clock, load the script
        results.put("ready")
        while (task := tasks.get()) is not None:
            address, attempts = task
            start.wait(60)
            began = time.time()
            allowed = sum(allow(address) for _ in range(attempts))
            results.put((allowed, began, time.time()))
