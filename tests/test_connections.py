"""Each thread keeps one connection of the pool; a forked child makes its own."""

from __future__ import annotations

import threading

from django_rl import get_policy
from django_rl.backends import redis as redis_backend


def test_each_thread_keeps_its_own_connection(redis_client):
    policy = get_policy("login")
    policy.hit("ip:192.0.2.1")
    backend = policy.backend
    mine = backend.client
    assert backend.client is mine
    before = len(redis_client.client_list())
    barrier = threading.Barrier(4)
    theirs = []

    def worker() -> None:
        policy.hit("ip:192.0.2.2")
        theirs.append(backend.client)
        barrier.wait(10)  # all three hold their connection now
        barrier.wait(10)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for thread in threads:
        thread.start()
    barrier.wait(10)
    during = len(redis_client.client_list())
    barrier.wait(10)
    for thread in threads:
        thread.join()
    assert during == before + 3
    assert len({id(client) for client in [mine, *theirs]}) == 4
    assert all(client.connection is not mine.connection for client in theirs)


def test_a_forked_child_makes_its_own_connections():
    backend = get_policy("login").backend
    inherited = backend.client
    redis_backend._after_fork_in_child()  # what os.register_at_fork runs in a child
    assert backend.client is not inherited
