"""Key hygiene, property-based, on every topology: keys have TTLs, stay few, and go away.

Hypothesis drives random sequences of hits (cost 1 to 3), peeks, resets,
sleeps and releases of concurrency slots over four algorithms and a mix of
plain and hostile identities.
After every step:

* every key under the prefix has a TTL, and none longer than its state can
  live (1 s here: every policy allows 3 per second);
* every key belongs to a (policy, identity) written to within that life,
  and there is one key per such pair: the number of keys is bounded by the
  number of live identities;

and at the end of each sequence, once the longest life has passed with no
traffic, no key of the app remains.

The one exception the model knows of: a fixed window numbers windows from
a local estimate of the Redis clock, so a hit within a few milliseconds of an
edge may open the next window's key while the last one has a few
milliseconds to live. Such a key is allowed only with a PTTL under
:data:`CLOCK_TOLERANCE_MS`.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from django_rl import get_policy, leases
from django_rl.core.decision import Decision
from django_rl.policies import reset_epoch
from tests.conftest import server_ms, sleep_until
from tests.support.properties import STATEFUL

pytestmark = pytest.mark.slow

PREFIX = "hy"
POLICIES = {
    "fw": {"algorithm": "fixed_window", "rate": "3/s", "key": "ip"},
    "sl": {"algorithm": "sliding_log", "rate": "3/s", "key": "ip"},
    "tb": {"algorithm": "token_bucket", "capacity": 3, "rate": "3/s", "key": "ip"},
    # Slots held for at most 1 s, given back by the "release" rule.
    "cc": {"algorithm": "concurrency", "limit": 3, "timeout": 1, "key": "ip"},
}
#: The longest any state lives after its last write: a 1 s window, 1 s to
#: refill 3 tokens at 3 per second, or a lease's 1 s timeout.
LIFE_MS = 1000
#: How far the local estimate of the Redis clock may be off (see module doc).
CLOCK_TOLERANCE_MS = 50
IDENTITIES = [
    "ip:192.0.2.1",
    "user:42",
    "ip:*",  # a glob character: digested
    "user:{evil}",  # braces: digested
    "x" * 5000,  # too long: digested
    "line\nbreak\x00",
]


class KeyHygiene(RuleBasedStateMachine):
    client = None  # set by the test: a client of the whole keyspace of the topology

    def __init__(self) -> None:
        super().__init__()
        #: (policy, identity) -> server time (ms) just after its last hit.
        self.written: dict[tuple[str, str], int] = {}
        self.policies = {name: get_policy(name) for name in POLICIES}
        #: Decisions of concurrency hits whose slots are still held.
        self.held: list[Decision] = []
        # Start clean even after a failed example (while Hypothesis shrinks).
        for key in self.client.scan_iter(match=f"{PREFIX}:*"):
            self.client.delete(key)

    @rule(
        name=st.sampled_from(list(POLICIES)),
        identity=st.sampled_from(IDENTITIES),
        cost=st.integers(1, 3),
    )
    def hit(self, name: str, identity: str, cost: int) -> None:
        decision = self.policies[name].hit(identity, cost)
        assert not decision.degraded
        self.written[name, identity] = server_ms(self.client)
        if decision.lease is not None:
            self.held.append(decision)

    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        """Give back the slots of a concurrency hit (a removal: no TTL to set)."""
        if self.held:
            leases.release(self.held.pop(data.draw(st.integers(0, len(self.held) - 1))))

    @rule(name=st.sampled_from(list(POLICIES)), identity=st.sampled_from(IDENTITIES))
    def peek(self, name: str, identity: str) -> None:
        self.policies[name].peek(identity)  # writes nothing, so the model does not change

    @rule(name=st.sampled_from(list(POLICIES)), identity=st.sampled_from(IDENTITIES))
    def reset(self, name: str, identity: str) -> None:
        self.policies[name].reset(identity)
        self.written.pop((name, identity), None)

    @rule(seconds=st.sampled_from([0.0, 0.05, 0.2, 0.6]))
    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def owner(self, key: str) -> tuple[str, str]:
        for name, identity in self.written:
            if key.startswith(self.policies[name].key(identity)):
                return name, identity
        for name, policy in self.policies.items():
            for identity in IDENTITIES:
                if key.startswith(policy.key(identity)):
                    return name, identity
        raise AssertionError(f"a key of no known policy and identity: {key!r}")

    @invariant()
    def keys_have_ttls_and_live_owners(self) -> None:
        now = server_ms(self.client)  # before the scan: keys found are at least this recent
        per_owner: Counter[tuple[str, str]] = Counter()
        for raw in self.client.scan_iter(match=f"{PREFIX}:*"):
            key = raw.decode()
            ttl = self.client.pttl(key)
            if key == f"{PREFIX}:~epoch":
                # The reset token (reset_epoch.py): the app's, not a counter,
                # and it keeps a TTL of its own.
                assert 0 < ttl <= reset_epoch.TOKEN_TTL_MS or ttl == -2, (key, ttl)
                continue
            if ttl == -2:
                continue  # expired since the scan
            assert ttl != -1, f"{key!r} has no TTL"
            # 0 is a live key in its last millisecond: Redis expires a key once
            # its clock is past the expiry time, and PTTL answers the time left,
            # rounded to 0 until then. (-1: no TTL; -2: gone.)
            assert 0 <= ttl <= LIFE_MS + CLOCK_TOLERANCE_MS, (key, ttl)
            owner = self.owner(key)
            assert owner in self.written, f"{key!r} outlived a reset"
            assert now - self.written[owner] <= LIFE_MS + CLOCK_TOLERANCE_MS, (key, ttl)
            if owner[0] == "fw" and ttl <= CLOCK_TOLERANCE_MS:
                continue  # the last window, about to end (see the module doc)
            per_owner[owner] += 1
        assert all(count == 1 for count in per_owner.values()), per_owner
        live = [o for o, at in self.written.items() if now - at <= LIFE_MS + CLOCK_TOLERANCE_MS]
        assert sum(per_owner.values()) <= len(live)

    def teardown(self) -> None:
        if self.written:
            # The invariant lets a key live through the very millisecond that
            # ends its longest life; it is gone only once the clock is past it.
            last_ms = max(self.written.values()) + LIFE_MS + CLOCK_TOLERANCE_MS
            sleep_until(self.client, last_ms + 1)
        left = list(self.client.scan_iter(match=f"{PREFIX}:*"))
        assert [key for key in left if key != f"{PREFIX}:~epoch".encode()] == []


def test_keys_have_ttls_stay_bounded_and_expire(settings, keyspace):
    settings.DJANGO_RL = {"KEY_PREFIX": PREFIX, "POLICIES": POLICIES}
    KeyHygiene.client = keyspace
    run_state_machine_as_test(KeyHygiene, settings=STATEFUL)
