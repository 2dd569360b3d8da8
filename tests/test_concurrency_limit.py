"""``concurrency``: at most ``limit`` requests of one identity in flight at once."""

from __future__ import annotations

from django_rl import get_policy, leases

POLICIES = {
    "slots": {"algorithm": "concurrency", "limit": 3, "timeout": 30, "key": "ip"},
}


def test_smoke(settings, redis_client):
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    policy = get_policy("slots")
    got = [policy.hit("ip:1") for _ in range(4)]
    print(got, [d.lease for d in got])
    assert [d.allowed for d in got] == [True, True, True, False]
    assert [d.remaining for d in got] == [2, 1, 0, 0]
    assert leases.release(got[0]) == 1
    assert policy.peek("ip:1").remaining == 1
    assert policy.hit("ip:1", 2).allowed is False
    leases.release(got)
    assert policy.peek("ip:1").remaining == 3
    print(redis_client.keys("*"))
