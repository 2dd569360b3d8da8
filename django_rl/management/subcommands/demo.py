"""``ratelimit demo``: the lesson's five scenarios, replayed with django_rl's own policies.

It runs against the configured connection under a scratch key prefix of its
own (``<KEY_PREFIX>-demo-<random>``) and deletes every key it wrote when it
ends, even on failure. The edge-burst rows wait for a window edge of the
Redis server's clock, so the whole replay takes about 4 seconds.
"""

from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandParser

from django_rl.algorithms.base import Algorithm
from django_rl.algorithms.fixed_window import FixedWindow
from django_rl.algorithms.sliding_log import SlidingLog
from django_rl.algorithms.token_bucket import TokenBucket
from django_rl.backends import Backend, RedisNode, get_backend
from django_rl.conf import get_settings
from django_rl.core.rates import parse_rate
from django_rl.core.reprs import counted
from django_rl.policies.registry import Policy

if TYPE_CHECKING:
    from redis import Redis

HELP = "Replay the rate-limiting lesson's five scenarios against Redis, then clean up."

LIMIT = 5


def add_arguments(parser: CommandParser) -> None:
    pass


def handle(command: BaseCommand, options: dict[str, Any]) -> None:
    settings = get_settings()
    backend = get_backend(settings.connection)
    prefix = f"{settings.key_prefix}-demo-{secrets.token_hex(4)}"
    write = command.stdout.write
    write(f"Replaying the lesson with django_rl (scratch key prefix {prefix!r}):\n")
    try:
        naive = f"{prefix}:naive:u1"
        write(naive_after_crash(backend.node_for(naive).client, naive))
        write(expire_nx_heals(backend.node_for(naive).client, naive))
        write(
            denied_with_retry_after(
                _policy("fixed-minute", FixedWindow(parse_rate("5/m")), backend, prefix)
            )
        )
        fixed = _policy("fixed-second", FixedWindow(parse_rate("5/s")), backend, prefix)
        sliding = _policy("sliding-second", SlidingLog(parse_rate("5/s")), backend, prefix)
        write(
            f"fixed window: allowed in 200 ms around the edge: {edge_burst(fixed)} of 10 "
            f"(limit is {LIMIT} per second)"
        )
        write(f"sliding log : allowed in 200 ms around the edge: {edge_burst(sliding)} of 10")
        bucket = _policy("bucket", TokenBucket(3, parse_rate("1/s")), backend, prefix)
        write(f"token bucket: 5 quick calls then one after 1.1 s -> {token_bucket_refill(bucket)}")
    finally:
        deleted = _clean_up(backend, prefix)
        write(f"\nDeleted the demo's {counted(deleted, 'key')}.")


def _policy(name: str, algorithm: Algorithm, backend: Backend, prefix: str) -> Policy:
    return Policy(
        name, algorithm, lambda request: None, backend, key_prefix=prefix, fail_open=False
    )


def _naive_hit(client: Redis, key: str, crash_after_incr: bool = False) -> bool:
    """THE ANTI-PATTERN the lesson warns about; it lives here only to be shown failing.

    INCR, then EXPIRE only when the count is 1. If the process dies between
    the two, the key never gets a TTL: the count climbs past the limit and
    the client is denied forever. django_rl never does this (see
    ``algorithms/fixed_window.py``: INCRBY and PEXPIREAT NX in one MULTI).
    """
    count = int(client.incr(key))
    if crash_after_incr:
        return True  # the process "dies" here: EXPIRE never runs
    if count == 1:
        client.expire(key, 60)
    return count <= LIMIT


def naive_after_crash(client: Redis, key: str) -> str:
    """Row 1: the naive limiter after a crash between INCR and EXPIRE."""
    _naive_hit(client, key, crash_after_incr=True)
    allowed = [_naive_hit(client, key) for _ in range(8)]
    words = " ".join("true" if a else "false" for a in allowed)
    return f"naive after crash: ttl = {client.ttl(key)} | allowed: {words}"


def expire_nx_heals(client: Redis, key: str) -> str:
    """Row 2: EXPIRE ... NX gives the stuck key a TTL, and leaves one alone."""
    first = int(client.expire(key, 60, nx=True))
    again = int(client.expire(key, 60, nx=True))
    return f"EXPIRE NX on a key without TTL -> {first} , again -> {again}"


def denied_with_retry_after(policy: Policy) -> str:
    """Row 3: the 6th and 7th hits of a 5/minute fixed window answer 429."""
    _wait_for_room(_node(policy, "user:u2"), period_ms=60_000, need_ms=2_000)
    decision = [policy.hit("user:u2") for _ in range(7)][-1]
    status = "200 OK" if decision.allowed else "429 Too Many Requests"
    return f"{status}\nRetry-After: {decision.retry_after_header} | remaining {decision.remaining}"


def edge_burst(policy: Policy) -> int:
    """Rows 4-5: 5 hits 100 ms before a 1 s window edge and 5 hits 100 ms after it."""
    node = _node(policy, "user:u3")
    edge = (node.now_ms() // 1000 + 1) * 1000
    if edge - node.now_ms() < 300:
        edge += 1000
    _sleep_until(node, edge - 100)
    before = sum(policy.hit("user:u3").allowed for _ in range(LIMIT))
    _sleep_until(node, edge + 100)
    after = sum(policy.hit("user:u3").allowed for _ in range(LIMIT))
    return before + after


def token_bucket_refill(policy: Policy) -> str:
    """Row 6: capacity 3, refill 1/s: five quick hits, then one 1.1 s later."""
    results = [policy.hit("user:u4").allowed for _ in range(5)]
    time.sleep(1.1)
    results.append(policy.hit("user:u4").allowed)
    return " ".join(str(int(r)) for r in results)


def _node(policy: Policy, identity: str) -> RedisNode:
    """Return the node whose clock numbers the windows of ``identity`` (its keys' node)."""
    return policy.backend.node_for(policy.key(identity))


def _sleep_until(node: RedisNode, server_ms: int) -> None:
    while (left := server_ms - node.now_ms()) > 0:
        time.sleep(left / 1000)


def _wait_for_room(node: RedisNode, period_ms: int, need_ms: int) -> None:
    """Wait for the next window if fewer than ``need_ms`` are left in this one."""
    now = node.now_ms()
    if period_ms - now % period_ms < need_ms:
        _sleep_until(node, (now // period_ms + 1) * period_ms)


def _clean_up(backend: Backend, prefix: str) -> int:
    """Delete the demo's keys on every node; return how many there were."""
    deleted = 0
    for node in backend.nodes():
        keys = list(node.client.scan_iter(match=f"{prefix}:*", count=1000))
        # One DEL per key: on a cluster, the keys of one node span many slots.
        pipe = node.client.pipeline(transaction=False)
        for key in keys:
            pipe.delete(key)
        deleted += sum(pipe.execute())
    return deleted
