"""redis-py's private layout, as ``backends/redis_py.py`` reads it, on the installed redis-py.

Guards: a redis-py release that moves what the short path reads fails here,
naming what moved, instead of decisions quietly taking redis-py's slower
way (or breaking). Run on every redis-py the project supports (setup.cfg:
``redis>=5.0``): the oldest and the newest at least.
"""

from __future__ import annotations

import pytest
import redis
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.retry import Retry

from django_rl.backends import redis_py
from django_rl.backends.connections import pool_full

VERSION = tuple(int(part) for part in redis.__version__.split(".")[:2])

pytestmark = pytest.mark.skipif(
    not redis.utils.HIREDIS_AVAILABLE, reason="the short path is for hiredis' parser"
)


@pytest.fixture(params=[2, 3], ids=["RESP2", "RESP3"])
def connection(request, redis_server):
    connection = redis.Connection(
        host="127.0.0.1", port=redis_server.port, protocol=request.param, socket_timeout=5
    )
    connection.connect()
    yield connection
    connection.disconnect()


def test_the_hiredis_parser_is_laid_out_as_the_short_path_reads_it(connection):
    from redis._parsers import hiredis

    parser = connection._parser
    assert type(parser) is hiredis._HiredisParser, f"redis-py {redis.__version__}: another parser"
    assert redis_py.NOT_ENOUGH_DATA is hiredis.NOT_ENOUGH_DATA
    assert redis_py.connected_socket(connection) is connection._sock is not None
    assert parser._reader is not None, "hiredis' reader: parser._reader"
    assert isinstance(parser._buffer, bytearray), "the parser's read buffer: parser._buffer"
    assert parser._reader.gets() is hiredis.NOT_ENOUGH_DATA
    assert redis_py.VERSION == VERSION
    if VERSION < (8, 0):
        assert hasattr(parser, "_next_response"), "redis-py < 8 reads ahead in _next_response"
    else:  # (the short path no longer looks for a reply read ahead: READS_AHEAD)
        assert not hasattr(parser, "_next_response"), "redis-py 8 reads ahead again"
    assert hasattr(parser, "_next_response") == redis_py.READS_AHEAD
    # Told apart from replies on the short path by the type hiredis gives them.
    assert parser._hiredis_PushNotificationType is redis_py.PUSH
    if VERSION >= (6, 0):
        assert hasattr(connection, "_should_reconnect"), "maintenance notices: _should_reconnect"
        assert callable(connection.should_reconnect)
    if getattr(parser, "_hiredis_PushNotificationType", None) is not None:
        # RESP3 push messages are told apart by that type, and go to this handler.
        assert callable(parser.handle_push_response)
    assert f":{connection.port}" in connection._host_error(), "the server's name: _host_error()"
    assert redis_py.socket_path_possible(connection)


def test_health_checks_keep_redis_pys_way(redis_server):
    checked = redis.Connection(port=redis_server.port, health_check_interval=30)
    assert not redis_py.socket_path_possible(checked)


def test_an_exchange_on_the_socket_is_what_redis_py_reads(connection):
    ping = b"".join(connection.pack_command("PING"))
    assert redis_py.SocketPath(connection).exchange(ping, 1) == [b"PONG"]
    commands = [
        ("MULTI",),
        ("DEL", "rp-k"),
        ("INCRBY", "rp-k", 2),
        ("HGET", "rp-k", "f"),
        ("EXEC",),
    ]
    multi = b"".join(b"".join(connection.pack_command(*command)) for command in commands)
    ok, *queued, (_, count, error) = redis_py.SocketPath(connection).exchange(multi, 5)
    assert ok in (b"OK", "OK") and all(each in (b"QUEUED", "QUEUED") for each in queued)
    assert (count, isinstance(error, ResponseError)) == (2, True)
    # Replies left none unread: redis-py's own read answers the next command.
    connection.send_command("PING")
    assert connection.read_response() in (b"PONG", "PONG")
    connection.disconnect()
    assert redis_py.connected_socket(connection) is None
    # Not connected: connected first, as redis-py's send does.
    assert redis_py.SocketPath(connection).exchange(ping, 1) == [b"PONG"]
    assert redis_py.connected_socket(connection) is not None


def test_replies_longer_than_a_read_are_read_whole(connection, redis_client):
    """A reply that spans several reads of the parser's buffer, alone or among others."""
    big = b"x" * (3 * len(connection._parser._buffer) + 17)
    redis_client.set("rp-big", big)
    path = redis_py.SocketPath(connection)
    get = b"".join(connection.pack_command("GET", "rp-big"))
    ping = b"".join(connection.pack_command("PING"))
    assert path.exchange(get, 1) == [big]
    assert path.exchange(ping + get + ping, 3) == [b"PONG", big, b"PONG"]
    assert path.exchange(ping, 1) == [b"PONG"]  # nothing left unread


def test_push_messages_among_the_replies_are_not_replies(redis_server, redis_client):
    """RESP3: an invalidation pushed before a reply goes to redis-py's handler."""
    connection = redis.Connection(port=redis_server.port, protocol=3, socket_timeout=5)
    connection.connect()
    try:
        path = redis_py.SocketPath(connection)

        def packed(*args):
            return b"".join(connection.pack_command(*args))

        assert path.exchange(packed("CLIENT", "TRACKING", "on"), 1) == [b"OK"]
        redis_client.set("rp-tracked", "1")
        assert path.exchange(packed("GET", "rp-tracked"), 1) == [b"1"]
        redis_client.set("rp-tracked", "2")  # Redis pushes an invalidation to the tracker
        assert path.exchange(packed("PING"), 1) == [b"PONG"]
        assert path.exchange(packed("GET", "rp-tracked") + packed("PING"), 2) == [b"2", b"PONG"]
        redis_client.set("rp-tracked", "3")
        assert path.exchange(packed("PING") + packed("PING"), 2) == [b"PONG", b"PONG"]
        assert path.exchange(packed("PING"), 1) == [b"PONG"]  # nothing left unread
    finally:
        connection.disconnect()


def test_a_read_that_fails_names_the_server_as_redis_py_does(connection):
    error = redis_py.failed_read(connection, OSError(104, "reset"))
    assert isinstance(error, RedisConnectionError)
    assert f":{connection.port}" in str(error)
    assert redis_py.connected_socket(connection) is None  # closed


def test_a_retry_is_counted_in_every_version():
    assert redis_py.retries(Retry(NoBackoff(), 0)) == 0
    assert redis_py.retries(Retry(NoBackoff(), 3)) == 3
    assert redis_py.retries(None) is None


def test_a_connection_that_never_retries_may_skip_execute_command(redis_server):
    never = redis.Connection(port=redis_server.port, retry=Retry(NoBackoff(), 0))
    assert redis_py.direct_possible(never)
    retrying = redis.Connection(port=redis_server.port, retry=Retry(NoBackoff(), 2))
    assert not redis_py.direct_possible(retrying)


def test_a_blocking_pool_with_nothing_to_give_is_seen(redis_server):
    pool = redis.BlockingConnectionPool(port=redis_server.port, max_connections=1, timeout=0.01)
    assert not redis_py.would_block(pool)
    taken = pool.get_connection("PING") if VERSION < (6, 0) else pool.get_connection()
    try:
        assert redis_py.would_block(pool)
    finally:
        pool.release(taken)
    assert not redis_py.would_block(redis.ConnectionPool(port=redis_server.port))


def test_a_full_pool_is_told_from_an_outage(redis_server):
    pool = redis.ConnectionPool(port=redis_server.port, max_connections=1)
    client = redis.Redis(connection_pool=pool, single_connection_client=True)
    try:
        with pytest.raises(RedisConnectionError) as raised:
            redis.Redis(connection_pool=pool).ping()
    finally:
        client.close()
    assert pool_full(raised.value)
    if VERSION >= (5, 1):
        assert redis_py.MAX_CONNECTIONS is redis.exceptions.MaxConnectionsError


def test_reply_reader_reads_as_redis_pys_hiredis_parser() -> None:
    from redis.exceptions import MovedError, NoScriptError, ResponseError

    from django_rl.backends.redis_py import reply_reader

    reader = reply_reader()
    reader.feed(b"-NOSCRIPT No matching script.\r\n-MOVED 3999 127.0.0.1:6381\r\n")
    reader.feed(b"-ERR boom\r\n:7\r\n*2\r\n$1\r\na\r\n:1\r\n")
    noscript, moved, error, number, array = (reader.gets() for _ in range(5))
    assert isinstance(noscript, NoScriptError)
    assert isinstance(moved, MovedError) and (moved.slot_id, moved.port) == (3999, 6381)
    assert type(error) is ResponseError and str(error).endswith("boom")
    assert (number, array) == (7, [b"a", 1])
    assert reader.gets() is False


def test_abandon_async_pool_closes_a_closed_loops_sockets(redis_server) -> None:
    import asyncio
    import gc
    import warnings

    import redis.asyncio

    from django_rl.backends.redis_py import abandon_async_pool

    loop = asyncio.new_event_loop()
    client = redis.asyncio.Redis.from_url(redis_server.url)
    loop.run_until_complete(client.ping())
    (connection,) = client.connection_pool._available_connections
    sock = connection._writer.transport.get_extra_info("socket")
    loop.close()
    abandon_async_pool(client.connection_pool)
    assert sock.fileno() == -1
    assert connection._writer is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        del client, connection
        gc.collect()
