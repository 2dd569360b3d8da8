"""The least-privilege Redis ACL rule for django_rl's connection (docs/security.md).

django_rl needs a few commands, on keys under its ``KEY_PREFIX`` only. The
rule below grants exactly those: decisions (MULTI/EXEC and the Lua scripts,
with the commands the scripts call), peeks, resets, the admin page and
``manage.py ratelimit`` (SCAN and reads), and naming the connection
(``client_name`` in the URL). ``HELLO`` needs no grant (every user may run
it; django_rl reads the server's version with it).

Two optional grants, both off in the rule: ``+config|get`` lets ``manage.py
check`` read ``maxmemory-policy`` (without it the check says it could not,
as a note), and the cluster grants (``cluster=True``) that redis-py's
cluster client needs to read the slot table.
"""

from __future__ import annotations

from collections.abc import Iterable

#: The commands of decisions, peeks and resets, including those the scripts
#: call: fixed_window (MULTI/EXEC of INCRBY, DECRBY, PEXPIREAT or PEXPIRE,
#: PTTL; GET to peek), the server's clock (TIME), the scripts (EVALSHA, EVAL
#: on NOSCRIPT, SCRIPT LOAD for pipelines) and their commands (gcra: GET,
#: SET, PEXPIRE, DEL; sliding_window and token_bucket: HMGET, HSET; concurrency:
#: ZREMRANGEBYSCORE, ZCOUNT, ZADD, ZRANGEBYSCORE, ZRANGE, PEXPIRE, DEL, and ZREM
#: to give a lease back), the refunds across cluster slots (refund.lua: EXISTS,
#: DECRBY, ZRANGEBYSCORE, ZRANK, ZREM, ZADD), and DEL.
DECISION_COMMANDS = (
    "multi", "exec", "incrby", "decrby", "pexpireat", "pexpire", "pttl", "get", "time",
    "evalsha", "eval", "script|load",
    "zcount", "zremrangebyrank", "zcard", "zrange", "zadd", "hmget", "hset", "del",
    "hgetall", "set", "zrem", "zrank",
)  # fmt: skip
#: The history behind the admin's charts (``observability/history.py``): each
#: process's writes once a second (HINCRBY, ZINCRBY, ZADD, ZREMRANGEBYRANK,
#: ZREMRANGEBYSCORE, PEXPIRE) and the admin's reads (HMGET, ZRANGE,
#: ZRANGEBYSCORE).
HISTORY_COMMANDS = ("hincrby", "zincrby", "zremrangebyscore", "zrangebyscore")
#: The admin page and ``manage.py ratelimit``: walk and read the app's keys;
#: the overrides' change marker (``SET``, granted above, when one is saved;
#: ``GET`` to poll); the reset token (``reset_epoch.py``: ``SET`` by every
#: reset, ``GET`` and ``SET`` inside its script).
ADMIN_COMMANDS = ("scan", "dbsize", "exists", "type")
#: Naming the connection (``?client_name=`` in the URL; redis-py sends it on connect).
CONNECTION_COMMANDS = ("client|setname",)
#: redis-py's cluster client: the slot table and the command table.
CLUSTER_COMMANDS = ("cluster|slots", "cluster|shards", "command")


def acl_rule(prefixes: str | Iterable[str] = "rl", *, cluster: bool = False) -> str:
    """Return the ``ACL SETUSER`` rule (without user name and password) for ``KEY_PREFIX``es.

    >>> acl_rule("rl").split()[:4]
    ['reset', 'on', '~rl:*', '-@all']
    """
    if isinstance(prefixes, str):
        prefixes = (prefixes,)
    commands = [*DECISION_COMMANDS, *HISTORY_COMMANDS, *ADMIN_COMMANDS, *CONNECTION_COMMANDS]
    if cluster:
        commands += CLUSTER_COMMANDS
    keys = [f"~{prefix}:*" for prefix in prefixes]
    return " ".join(["reset", "on", *keys, "-@all", *(f"+{c}" for c in commands)])
