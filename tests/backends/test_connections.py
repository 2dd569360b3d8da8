"""Each thread keeps one connection, through error replies too; a forked child makes its own."""

from __future__ import annotations

import gc
import threading

import pytest
from django.test import override_settings
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from django_rl import get_policy
from django_rl.backends import get_backend, resp
from django_rl.backends import node as redis_node
from tests.support.redis_server import RedisServer, caches_for

#: No other test uses this database.
DB = 5


def connections_on(client, db: int) -> int:
    return sum(1 for c in client.client_list() if c["db"] == str(db))


def hit_in_threads(policy, count: int) -> tuple[set[int], int]:
    """Hit from ``count`` threads at once.

    Return the ids of their clients and the connections counted while every
    thread held its own (no reference to a client is kept).
    """
    barrier = threading.Barrier(count + 1)
    clients: set[int] = set()

    def worker() -> None:
        policy.hit("ip:192.0.2.2")
        clients.add(id(policy.backend.client))
        barrier.wait(10)  # every thread holds its connection now
        barrier.wait(10)

    threads = [threading.Thread(target=worker) for _ in range(count)]
    for thread in threads:
        thread.start()
    barrier.wait(10)
    during = connections_on(policy.backend.client, DB)
    barrier.wait(10)
    for thread in threads:
        thread.join()
    return clients, during


def test_each_thread_keeps_one_connection_given_back_when_it_ends(redis_server, redis_client):
    # A database of its own: its own URL, so a pool of its own (django-redis
    # keeps one per URL for the process) whose connections we can count.
    with override_settings(CACHES=caches_for(redis_server.url.removesuffix("/0") + f"/{DB}")):
        policy = get_policy("login")
        policy.hit("ip:192.0.2.1")
        mine = policy.backend.client
        assert policy.backend.client is mine
        assert connections_on(redis_client, DB) == 1
        theirs, during = hit_in_threads(policy, 3)
        assert (during, len(theirs | {id(mine)})) == (4, 4)
        gc.collect()
        # Three new threads reuse the three connections given back: none is opened.
        assert hit_in_threads(policy, 3)[1] == 4


def test_a_forked_child_makes_its_own_connections():
    backend = get_policy("login").backend
    inherited = backend.client
    redis_node._after_fork_in_child()  # what os.register_at_fork runs in a child
    assert backend.client is not inherited


def test_a_redis_restart_costs_no_decision(caplog):
    # The kept connection finds out the server closed it when it uses it, and
    # sends the command once more on a new one.
    server = RedisServer()
    server.start()
    try:
        with override_settings(CACHES=caches_for(server.url)):
            policy = get_policy("login")
            assert policy.hit("ip:192.0.2.3").remaining == 4
            port = server.port
            server.stop()
            server.start(port=port)
            decisions = [policy.hit("ip:192.0.2.3") for _ in range(2)]
    finally:
        server.close()
    assert [(d.degraded, d.remaining) for d in decisions] == [(False, 4), (False, 3)]
    assert caplog.records == []


def encoded_transaction(commands) -> bytes:
    """Return MULTI, ``commands`` and EXEC in RESP, as ``fixed_window.py`` encodes its hit's."""
    return b"".join(
        [resp.command(["MULTI"]), *(resp.command(c) for c in commands), resp.command(["EXEC"])]
    )


def run_transaction(client, commands, how: str):
    """Run ``commands`` in one MULTI/EXEC: as given (redis-py's packer), or encoded already."""
    if how == "commands":
        return client.transaction_replies(commands)
    return client.transaction_encoded(encoded_transaction(commands), len(commands))


@pytest.mark.parametrize("how", ["commands", "encoded"])
def test_an_error_reply_in_a_multi_leaves_the_connection_usable(redis_client, how):
    # The server refuses a command when it is queued (then EXEC answers
    # EXECABORT: OOM, NOPERM, wrong arguments), or inside EXEC (WRONGTYPE).
    client = get_backend("default").client  # this thread's kept connection
    connection = client.client_id()
    redis_client.delete("k")
    redis_client.hset("a-hash", "f", "v")
    refused = [
        ([("INCRBY", "k")], "wrong number of arguments for 'incrby'"),
        ([("INCRBY", "k", 1), ("NOSUCHCOMMAND", "k")], "unknown command 'NOSUCHCOMMAND'"),
        ([("INCRBY", "k", 1), ("INCRBY", "a-hash", 1)], "WRONGTYPE"),
    ]
    for commands, error in refused:
        with pytest.raises(ResponseError, match=error):
            run_transaction(client, commands, how)
        # Every reply was read: the same connection, in step, answers the next one.
        assert client.client_id() == connection
    # The INCRBY of the transaction whose other command failed inside EXEC ran.
    assert run_transaction(client, [("INCRBY", "k", 2), ("PTTL", "k")], how) == [3, -1]
    assert get_backend("default").client is client


def test_a_command_goes_straight_to_the_kept_connection_where_redis_py_would_add_nothing():
    # django-redis' connections never retry: a command skips redis-py's
    # execute_command (its lock, retry closure and metrics look-up).
    client = get_backend("default").client
    assert client.ping() is True
    assert client._direct_ok is True
    assert client.execute_command("SET", "direct-k", "1") is True  # SET's callback applied
    assert client.get("direct-k") == b"1"
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        client.hget("direct-k", "f")  # an error reply: raised, the connection kept
    assert client.connection._sock is not None
    assert client.echo("still in step") == b"still in step"


def test_a_connection_that_retries_takes_redis_pys_way(redis_server):
    retrying = caches_for(
        redis_server.url.removesuffix("/0") + "/6",
        CONNECTION_POOL_KWARGS={"retry_on_timeout": True},
    )
    with override_settings(CACHES=retrying):
        client = get_backend("default").client
        assert client.ping() is True
        assert client._direct_ok is False  # redis-py's retry decides, as configured
        assert client.transaction_replies([("INCRBY", "retrying-k", 2)]) == [2]


def test_no_answer_on_the_short_path_closes_the_connection():
    server = RedisServer()
    server.start()
    try:
        with override_settings(CACHES=caches_for(server.url)):
            client = get_backend("default").client
            assert client.ping() is True
            server.pause()  # SIGSTOP: connected, no answer
            try:
                with pytest.raises(RedisTimeoutError, match="Timeout reading"):
                    client.transaction_replies([("INCRBY", "paused-k", 1)])
                assert client.connection._sock is None  # closed: replies may be left unread
                with pytest.raises(RedisTimeoutError):
                    client.execute_command("INCRBY", "paused-k", 1)
                assert client.connection._sock is None
            finally:
                server.resume()
            assert client.execute_command("INCRBY", "paused-k", 1) in (1, 2, 3)
    finally:
        server.close()


def test_an_encoded_script_sends_what_redis_py_would_send(redis_server):
    from django_rl.algorithms.token_bucket import SCRIPT
    from django_rl.backends.scripts import EncodedScript

    encoded = EncodedScript(SCRIPT, (5, 1, 1000), 3)
    client = get_backend("default").client
    client.script_load(SCRIPT.source)
    connection = client.connection
    recorder = connection._sock = RecordingSocket(connection._sock)
    try:
        reply = encoded(client, "rl:x:{ü}:f", 2, "1", "")
    finally:
        connection._sock = recorder.sock
    packed = connection.pack_command("EVALSHA", SCRIPT.sha, 1, "rl:x:{ü}:f", 5, 1, 1000, 2, "1", "")
    assert recorder.sent == [b"".join(packed)]  # one write, redis-py's bytes
    assert reply[:2] == [1, 3000]  # allowed; 3 tokens of 5 left, in units of 1/1000
    assert client._on_socket is True  # straight to the socket (hiredis, no health checks)


@pytest.mark.parametrize(
    "suffixes",
    [("",), ("", ":b"), (":29000000", ":b"), (":ä", "")],
    ids=["one", "block", "window", "utf-8"],
)
def test_an_encoded_scripts_keys_are_the_key_and_each_suffix(suffixes):
    from django_rl.algorithms.token_bucket import SCRIPT
    from django_rl.backends.scripts import EncodedScript

    client = get_backend("default").client
    encoded = EncodedScript(SCRIPT, (5, 1, 1000), 3, suffixes)
    key = "rl:x:{ü}:f"
    keys = [key + suffix for suffix in suffixes]
    assert encoded.keys(key) == tuple(keys)
    packed = client.connection.pack_command(
        "EVALSHA", SCRIPT.sha, len(keys), *keys, 5, 1, 1000, 2, "1", ""
    )
    assert encoded.encode(key, (2, "1", "")) == b"".join(packed)


@pytest.mark.parametrize("suffixes", [(), ("", ":a", ":b")])
def test_an_encoded_script_takes_one_or_two_keys(suffixes):
    from django_rl.algorithms.token_bucket import SCRIPT
    from django_rl.backends.scripts import EncodedScript

    with pytest.raises(ValueError, match="one or two keys"):
        EncodedScript(SCRIPT, (), 0, suffixes)


class RecordingSocket:
    """A socket that records what is written to it, and passes everything on."""

    def __init__(self, sock) -> None:
        self.sock = sock
        self.sent: list[bytes] = []

    def sendall(self, data, *args) -> None:
        self.sent.append(bytes(data))
        self.sock.sendall(data, *args)

    def __getattr__(self, name):
        return getattr(self.sock, name)


@pytest.mark.parametrize("protocol", [2, 3])
def test_a_decision_on_the_socket_path_reads_its_reply_and_every_error_as_redis_py(
    redis_server, protocol
):
    # RESP2 and RESP3 (redis-py 8's default): replies, error replies, a
    # server that closes the connection, one that does not answer.
    from django_rl.algorithms.token_bucket import SCRIPT
    from django_rl.backends.scripts import EncodedScript

    server = RedisServer()
    server.start()
    try:
        with override_settings(
            CACHES=caches_for(server.url, CONNECTION_POOL_KWARGS={"protocol": protocol})
        ):
            client = get_backend("default").client
            client.script_load(SCRIPT.source)
            encoded = EncodedScript(SCRIPT, (5, 1, 3_600_000), 3)  # 5, then 1 an hour

            def tokens_left() -> int:
                allowed, units = encoded(client, "rl:x:{p}:f", 1, "1", "")[:2]
                assert allowed == 1
                return units // 3_600_000  # units: tokens x the period in ms

            assert tokens_left() == 4
            assert client._on_socket is True and client.connection.protocol == protocol
            with pytest.raises(ResponseError):
                EncodedScript(SCRIPT, (), 0)(client, "rl:x:{y}:f")  # the script fails
            assert tokens_left() == 3  # in step
            # The server closes the connection: a new one, the command sent once more.
            (victim,) = [c for c in server.client().client_list() if c["cmd"] != "client|list"]
            server.client().client_kill_filter(_id=victim["id"])
            assert tokens_left() == 2
            server.pause()  # SIGSTOP: connected, no answer
            try:
                with pytest.raises(RedisTimeoutError, match="Timeout reading"):
                    encoded(client, "rl:x:{p}:f", 1, "1", "")
                assert client.connection._sock is None  # closed: a reply may be left unread
            finally:
                server.resume()
    finally:
        server.close()


@pytest.mark.parametrize("protocol", [2, 3])
def test_a_transaction_on_the_socket_path_reads_its_replies_and_every_error_as_redis_py(
    redis_server, protocol
):
    # The fixed window's MULTI/EXEC, encoded already: one write, its five
    # replies read off the socket, RESP2 and RESP3; errors as redis-py's.
    server = RedisServer()
    server.start()
    try:
        with override_settings(
            CACHES=caches_for(server.url, CONNECTION_POOL_KWARGS={"protocol": protocol})
        ):
            client = get_backend("default").client
            assert client.ping() is True

            def count() -> int:
                commands = [("INCRBY", "tx-k", 1), ("PEXPIRE", "tx-k", 60_000), ("PTTL", "tx-k")]
                hits, expiry_set, ttl = client.transaction_encoded(encoded_transaction(commands), 3)
                assert expiry_set == 1 and 0 < ttl <= 60_000
                return hits

            connection = client.connection
            recorder = connection._sock = RecordingSocket(connection._sock)
            assert count() == 1
            assert len(recorder.sent) == 1  # one write for the whole transaction
            assert client._on_socket is True and connection.protocol == protocol
            with pytest.raises(ResponseError, match="WRONGTYPE"):
                server.client().hset("tx-hash", "f", "v")
                client.transaction_encoded(encoded_transaction([("INCRBY", "tx-hash", 1)]), 1)
            assert count() == 2  # in step
            # The server closes the connection: a new one, the transaction sent once more.
            (victim,) = [c for c in server.client().client_list() if c["cmd"] != "client|list"]
            server.client().client_kill_filter(_id=victim["id"])
            assert count() == 3
            server.pause()  # SIGSTOP: connected, no answer
            try:
                with pytest.raises(RedisTimeoutError, match="Timeout reading"):
                    count()
                assert client.connection._sock is None  # closed: replies may be left unread
            finally:
                server.resume()
            assert count() == 5  # the one that timed out had reached the server
    finally:
        server.close()


def test_an_encoded_script_raises_an_error_reply_of_its_own(redis_server):
    from django_rl.algorithms.token_bucket import SCRIPT
    from django_rl.backends.scripts import EncodedScript

    client = get_backend("default").client
    with pytest.raises(ResponseError):
        EncodedScript(SCRIPT, (), 0)(client, "rl:x:{y}:f")  # no arguments: the script fails
    assert client.ping()  # the connection stays usable


def test_a_forked_child_is_not_stuck_on_a_pool_lock_held_at_the_fork():
    # Another thread of the parent holds the pool's lock when the process
    # forks (a Celery worker's pool forks while the history thread takes a
    # connection): the child's first decision must not wait for it forever.
    import os
    import threading

    policy = get_policy("login")
    policy.hit("ip:192.0.2.9")
    pool = policy.backend.pooled_client.connection_pool
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with pool._lock:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(5)
    pid = os.fork()
    if pid == 0:  # the child: exit 0 once its decision is made, 1 on anything else
        code = 1
        try:
            import signal

            signal.alarm(5)  # stuck: SIGALRM ends the child
            code = 0 if not get_policy("login").hit("ip:192.0.2.9").degraded else 1
        finally:
            os._exit(code)
    release.set()
    holder.join()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
