"""Moving a slot of the suite's cluster with its keys, as ``redis-cli --cluster reshard`` does.

A reshard moves a slot in three steps: the target is told it is
``IMPORTING`` the slot and the source that it is ``MIGRATING`` it; the keys
go over in batches (``MIGRATE ... KEYS``, each batch atomic); then every
node is told the target owns it (``SETSLOT ... NODE``). Between the first
and the last step the source answers ``ASK`` for a key it no longer has (or
never had), and ``TRYAGAIN`` for a command on several keys of which it has
only some.

The cluster is shared by the whole session: :func:`restore` puts a slot back
on its first owner, empty, and waits until every node agrees on the owners.
"""

from __future__ import annotations

import binascii
import functools
import itertools
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import redis
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from tests.support.redis_server import RedisServer
from tests.support.topologies import ClusterTopology

#: TTL of the filler keys that give a moving slot some weight.
FILLER_TTL = 600


@functools.cache
def identities_in_slot(slot: int, count: int) -> list[str]:
    """Return ``count`` identities (``ip:10.x.y.z``) whose hash tag falls in ``slot``."""
    found = []
    for i in itertools.count():
        identity = f"ip:10.{i // 62500 % 250}.{i // 250 % 250}.{i % 250}"
        # The slot of a key whose hash tag is the identity (CRC16 mod 16384).
        if binascii.crc_hqx(identity.encode(), 0) % REDIS_CLUSTER_HASH_SLOTS == slot:
            found.append(identity)
            if len(found) == count:
                break
    assert all(key_slot(f"rl:{{{identity}}}".encode()) == slot for identity in found)
    return found


def first_slot(cluster: ClusterTopology) -> tuple[int, RedisServer, RedisServer]:
    """Return slot 0, its owner and another primary.

    Slot 0 is the lowest slot of its owner, so it is the one
    ``redis-cli --cluster reshard --cluster-slots 1`` moves from it.
    """
    source = cluster.server_of_slot(0)
    target = next(s for s in cluster.primary_servers() if s is not source)
    return 0, source, target


def fill(server: RedisServer, tag: str, keys: int) -> None:
    """Write ``keys`` filler keys in ``tag``'s slot on ``server`` (its owner), each with a TTL."""
    client = server.client(socket_timeout=30)
    try:
        for start in range(0, keys, 5000):
            pipe = client.pipeline(transaction=False)
            for i in range(start, min(start + 5000, keys)):
                pipe.set(f"filler:{{{tag}}}:{i}", "x" * 20, ex=FILLER_TTL)
            pipe.execute()
    finally:
        client.close()


@dataclass
class SlotMove:
    """A slot on its way from ``source`` to ``target``, moved one batch of keys at a time."""

    cluster: ClusterTopology
    slot: int
    source: RedisServer
    target: RedisServer
    moved: int = 0
    _ids: dict[int, str] = field(default_factory=dict)

    def begin(self) -> None:
        """Mark the slot IMPORTING on the target, then MIGRATING on the source."""
        self._ids = {n["port"]: n["id"] for n in self.cluster.nodes()}
        _command(
            self.target, "CLUSTER SETSLOT", self.slot, "IMPORTING", self._ids[self.source.port]
        )
        _command(
            self.source, "CLUSTER SETSLOT", self.slot, "MIGRATING", self._ids[self.target.port]
        )

    def migrate(self, keys: int | None = None, batch: int = 100, pause: float = 0.0) -> int:
        """Move up to ``keys`` keys (all by default) in ``MIGRATE`` batches; return how many.

        ``pause`` seconds between batches stretch the move, as a slow
        network or a busy source would.
        """
        client = self.source.client(socket_timeout=30)
        moved = 0
        try:
            while keys is None or moved < keys:
                size = batch if keys is None else min(batch, keys - moved)
                names = client.execute_command("CLUSTER GETKEYSINSLOT", self.slot, size)
                if not names:
                    break
                client.execute_command(
                    "MIGRATE", "127.0.0.1", self.target.port, "", 0, 5000, "KEYS", *names
                )
                moved += len(names)
                if pause:
                    time.sleep(pause)
        finally:
            client.close()
        self.moved += moved
        return moved

    def migrate_keys(self, names: list[str]) -> None:
        """Move these keys (those the source still has) to the target now."""
        client = self.source.client()
        try:
            present = [name for name in names if client.exists(name)]
            if present:
                client.execute_command(
                    "MIGRATE", "127.0.0.1", self.target.port, "", 0, 5000, "KEYS", *present
                )
        finally:
            client.close()

    def finish(self) -> None:
        """Give the slot to the target: the target first, then the source, then the others."""
        owner = self._ids[self.target.port]
        for server in (self.target, self.source):
            _command(server, "CLUSTER SETSLOT", self.slot, "NODE", owner)
        for server in self.cluster.primary_servers():
            if server not in (self.target, self.source):
                _command(server, "CLUSTER SETSLOT", self.slot, "NODE", owner)


def reshard_with_redis_cli(
    cluster: ClusterTopology, source: RedisServer, target: RedisServer
) -> float:
    """Move the lowest slot of ``source`` to ``target`` with ``redis-cli --cluster reshard``.

    Return how long it took.
    """
    ids = {n["port"]: n["id"] for n in cluster.nodes()}
    started = time.monotonic()
    done = subprocess.run(
        [
            "redis-cli",
            "--cluster",
            "reshard",
            f"127.0.0.1:{source.port}",
            "--cluster-from",
            ids[source.port],
            "--cluster-to",
            ids[target.port],
            "--cluster-slots",
            "1",
            "--cluster-yes",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"redis-cli --cluster reshard failed: {done.stdout}{done.stderr}")
    return time.monotonic() - started


def restore(cluster: ClusterTopology, slot: int, owner: RedisServer) -> None:
    """Empty the cluster, end any migration of ``slot`` and give it back to ``owner``; wait.

    Every node then agrees on the slot owners again (replicas included),
    for the tests that follow.
    """
    cluster.flush()
    for server in cluster.primary_servers():
        _command(server, "CLUSTER SETSLOT", slot, "STABLE")
    now = cluster.server_of_slot(slot)
    if now is not owner:
        move = SlotMove(cluster, slot, now, owner)
        move.begin()
        move.finish()
    cluster.wait_healthy()


def _command(server: RedisServer, *args: object) -> None:
    client = server.client()
    try:
        client.execute_command(*args)
    finally:
        client.close()


class Rounds:
    """Threads that hit fresh identities together, round after round, until stopped.

    In each round every thread makes ``attempts`` hits of every policy for
    the round's identity, then waits for the others (a barrier), so each
    identity meets all threads at once. Each decision is recorded as
    ``(round, policy, allowed, degraded)``. With ``steady`` (an identity
    already at its limit), one more thread hits it under every policy
    without pause, its decisions recorded in :attr:`held` as
    ``(policy, allowed, degraded)``.
    """

    def __init__(
        self,
        identities: list[str],
        policies: list[str],
        threads: int,
        attempts: int,
        steady: str | None = None,
    ) -> None:
        from django_rl import get_policy

        self._policies = [get_policy(name) for name in policies]
        self.identities = identities
        self.attempts = attempts
        self.steady = steady
        self.made: list[tuple[int, str, bool, bool]] = []
        self.held: list[tuple[str, bool, bool]] = []
        self.rounds = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._barrier = threading.Barrier(threads, action=self._next_round)
        self._round = 0
        self._threads = [threading.Thread(target=self._run) for _ in range(threads)]
        if steady is not None:
            self._threads.append(threading.Thread(target=self._hold, args=(steady,)))
        self.errors: list[BaseException] = []

    def _next_round(self) -> None:
        self._round += 1

    def __enter__(self) -> Rounds:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)
        if self.errors:
            raise self.errors[0]

    def wait_rounds(self, count: int, timeout: float = 30) -> None:
        """Wait until ``count`` more rounds have ended."""
        goal = self._round + count
        deadline = time.monotonic() + timeout
        while self._round < goal:
            assert time.monotonic() < deadline, "the rounds do not progress"
            time.sleep(0.005)

    def _run(self) -> None:
        try:
            while True:
                number = self._round
                if self._stop.is_set() or number >= len(self.identities):
                    self._barrier.abort()
                    return
                identity = self.identities[number]
                made = []
                for _ in range(self.attempts):
                    for policy in self._policies:
                        decision = policy.hit(identity)
                        made.append((number, policy.name, decision.allowed, decision.degraded))
                with self._lock:
                    self.made += made
                self._barrier.wait()
        except threading.BrokenBarrierError:
            return
        except BaseException as exc:  # shown by __exit__
            self.errors.append(exc)
            self._barrier.abort()

    def _hold(self, identity: str) -> None:
        try:
            while not self._stop.is_set():
                for policy in self._policies:
                    decision = policy.hit(identity)
                    self.held.append((policy.name, decision.allowed, decision.degraded))
        except BaseException as exc:  # shown by __exit__
            self.errors.append(exc)

    @property
    def finished_rounds(self) -> int:
        return self._round


def each_round(made: list[tuple[int, str, bool, bool]]) -> Iterator[tuple[int, str, int, int]]:
    """Yield ``(round, policy, allowed, degraded)`` totals of each round of each policy."""
    totals: dict[tuple[int, str], list[int]] = {}
    for number, policy, allowed, degraded in made:
        entry = totals.setdefault((number, policy), [0, 0])
        entry[0] += allowed
        entry[1] += degraded
    for (number, policy), (allowed, degraded) in sorted(totals.items()):
        yield number, policy, allowed, degraded


def redis_on(server: RedisServer) -> redis.Redis:
    return server.client()
