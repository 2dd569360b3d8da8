"""Checks that ask the Redis server itself, before traffic does (``manage.py check``).

The other checks read settings; these connect to the ``CONNECTION`` alias'
Redis (each primary of a cluster) and find what would otherwise show only
as failed decisions:

=============== ==========================================================
id              problem
=============== ==========================================================
django_rl.E070  the server is older than the oldest supported (Redis 6.2)
django_rl.E071  a trial decision of an algorithm a policy uses fails with
                an error reply: the ACL user lacks a command (named), a
                command is unknown or renamed, the server refuses ``TIME``
                in scripts, ...
django_rl.E072  the server refuses the connection's user name or password
django_rl.E073  the TLS connection fails: the server's certificate is not
                trusted, or the server does not speak TLS there
django_rl.W070  ``maxmemory-policy`` can evict keys that have a TTL before
                they expire (``allkeys-*``, ``volatile-*``): an evicted
                counter lets its client start again from zero
django_rl.W071  Redis could not be reached: none of the above was checked
django_rl.I070  ``maxmemory-policy`` could not be read (``CONFIG GET`` is
                refused, as on managed services): a note to check it
=============== ==========================================================

The trial decision runs each algorithm the policies use once, as a hit and
a peek of cost 1, on a scratch identity of a policy that uses it (on every
primary of a cluster), then deletes its keys (which have TTLs anyway). It
runs on connections of its own from the alias' pool, so nothing of it is
logged or counted as the decisions' health. The whole check waits at most
:data:`CHECK_TIMEOUT` seconds, whatever the alias' socket timeouts.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import ssl
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, Info, Warning, register
from redis.exceptions import AuthenticationError, RedisError, ResponseError

from django_rl.algorithms import ALGORITHMS
from django_rl.backends import LuaScript, get_backend
from django_rl.backends.capabilities import MINIMUM_VERSION
from django_rl.backends.connections import discard
from django_rl.backends.errors import REPLIES, reply_kind
from django_rl.backends.node import RedisNode
from django_rl.checks.validation import policy_problems, settings_problems
from django_rl.conf import DEFAULTS, raw_settings
from django_rl.core.rates import parse_rate
from django_rl.docs_urls import doc_url
from django_rl.exceptions import ConfigurationError
from django_rl.policies.plans import is_rate_function

#: The longest ``manage.py check`` waits for the server checks, in seconds.
CHECK_TIMEOUT = 10.0
_SEE = f"See {doc_url('reliability', 'servers')}."
_SECURITY = f"{doc_url('security', 'a-redis-user-of-its-own')} gives the least-privilege rule"
#: Eviction policies that never delete a key before its TTL.
SAFE_EVICTION = frozenset({"noeviction"})


@register()
def check_server(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Run the checks of the module's docstring, if the settings allow (else: nothing)."""
    found: list[CheckMessage] = []
    done = threading.Event()

    def run() -> None:
        try:
            found.extend(_server_messages())
        finally:
            done.set()

    # A daemon thread: a server that hangs, with no socket timeout set
    # (django_rl.W031), must not hang manage.py.
    threading.Thread(target=run, name="django_rl server checks", daemon=True).start()
    if not done.wait(CHECK_TIMEOUT):
        return [
            Warning(
                f"Redis for rate limiting did not answer the checks within {CHECK_TIMEOUT:g} s",
                hint=f"Is it up, and reachable from here? Its server was not checked. {_SEE}",
                id="django_rl.W071",
            )
        ]
    return list(found)


def _server_messages() -> list[CheckMessage]:
    raw = raw_settings()
    if settings_problems(raw) or not isinstance(raw, Mapping):
        return []  # check_settings reports them
    merged = {**DEFAULTS, **raw}
    alias = merged["CONNECTION"]
    config = getattr(django_settings, "CACHES", {}).get(alias)
    if not isinstance(config, Mapping) or "django_redis" not in str(config.get("BACKEND", "")):
        return []  # E003 / E004
    trials = dict(_trial_policies(merged))
    try:
        backend = get_backend(alias)
        nodes = backend.nodes()
    except ConfigurationError:
        return []  # reported by the settings checks
    except RedisError as exc:
        return [_unreachable(f"CACHES[{alias!r}]", exc)]
    messages: list[CheckMessage] = []
    for node in nodes:
        where = f"CACHES[{alias!r}]" + (f", node {node.address}" if node.address else "")
        scratch = _ScratchNode(node)
        try:
            messages += _check_node(where, backend, node, scratch, trials)
        except RedisError as exc:
            messages.append(_unreachable(where, exc))
        finally:
            scratch.close()
    return messages


def _trial_policies(merged: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Yield (algorithm name, the first valid policy that uses it) from POLICIES."""
    policies = merged["POLICIES"]
    if not isinstance(policies, Mapping):
        return
    seen = set()
    for name, spec in policies.items():
        if policy_problems(name, spec):
            continue
        rate = spec.get("rate")
        if rate is None or is_rate_function(rate) or parse_rate(rate).denies_all:
            continue  # a rate per request (no one algorithm), or static (no state)
        algorithm = spec["algorithm"]
        if algorithm in ALGORITHMS and algorithm not in seen:
            seen.add(algorithm)
            yield algorithm, name


class _ScratchNode(RedisNode):
    """A node on connections of its own from ``node``'s pool: its calls touch no shared health."""

    def __init__(self, node: RedisNode) -> None:
        super().__init__(node.alias, node.address, node.pooled_client)

    def close(self) -> None:
        client = getattr(self._local, "client", None)
        if client is not None:
            discard(client)


def _check_node(
    where: str, backend: Any, node: RedisNode, scratch: _ScratchNode, trials: dict[str, str]
) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    capabilities = scratch.capabilities
    if not capabilities.supported:
        messages.append(
            Error(
                f"Redis for rate limiting ({where}) is {capabilities.label}, older than "
                f"Redis {'.'.join(map(str, MINIMUM_VERSION[:2]))}, the oldest django_rl supports",
                hint=f"Upgrade the server to Redis 6.2 or later, or Valkey. {_SEE}",
                id="django_rl.E070",
            )
        )
    messages += _eviction_messages(where, scratch)
    from django_rl.policies.registry import get_policy

    for algorithm, name in trials.items():
        policy = get_policy(name)
        key = _scratch_key(policy, backend, node)
        keys = [key]
        try:
            policy.algorithm.hit(scratch, key, 1)
            policy.algorithm.peek(scratch, key)
            keys = policy.algorithm.keys(scratch, key)
            scratch.client.delete(*keys)  # what Policy.reset sends
        except ResponseError as exc:
            kind = reply_kind(exc)
            if kind is None:
                raise  # an outage reply (READONLY, CLUSTERDOWN, ...)
            script = getattr(policy.algorithm, "script", None)
            messages.append(_failed_trial(where, algorithm, name, kind, exc, script))
            # The keys a fixed window may have written are named by the time;
            # when it could not be read, or DEL is refused, they go by their TTL.
            with contextlib.suppress(ResponseError):
                scratch.client.delete(*keys)
    return messages


def _scratch_key(policy: Any, backend: Any, node: RedisNode) -> str:
    """Return the key of a fresh identity of ``policy`` that lives on ``node``."""
    token = secrets.token_hex(6)
    for i in range(100_000):
        key: str = policy.key(f"django_rl-check-{token}-{i}")
        if backend.node_for(key) is node:
            return key
    raise AssertionError("no scratch identity maps to the node")  # pragma: no cover


def _refused_command(message: str, script: LuaScript | None) -> str | None:
    """Return the command an ACL refusal names, or the one on the script's line it names.

    Redis says ``no permissions to run the 'pexpireat' command``, but from
    inside a script (Redis 7) only ``can't run this command ... on
    @user_script:134``: line 134 of the script holds the ``redis.call``.
    """
    named = re.search(r"'([^']+)' command", message)
    if named is not None:
        return named.group(1)
    line = re.search(r"@user_script:(\d+)", message)
    if line is None or script is None:
        return None
    lines = script.source.splitlines()
    number = int(line.group(1))
    if not 1 <= number <= len(lines):
        return None
    call = re.search(r"redis\.call\('([^']+)'", lines[number - 1])
    return call.group(1) if call is not None else None


def _failed_trial(
    where: str,
    algorithm: str,
    policy: str,
    kind: str,
    exc: ResponseError,
    script: LuaScript | None,
) -> CheckMessage:
    message = str(exc)
    reply = REPLIES[kind]
    hint = f"{reply.fix}."
    if kind == "noperm":
        command = _refused_command(message, script)
        if command is not None:
            lacks = f"the command {command.upper()}"
        elif "key" in message.lower():
            lacks = "access to the keys under KEY_PREFIX"
        else:
            lacks = "a permission"
        return Error(
            f"Redis for rate limiting ({where}) refuses the {algorithm} algorithm (policy "
            f"{policy!r}) to this connection's ACL user, which lacks {lacks}: {message}",
            hint=f"Grant it to the user; {_SECURITY}.",
            id="django_rl.E071",
        )
    if kind == "script" and re.search(r"\btime\b|random|non.?determin", message, re.IGNORECASE):
        hint = (
            "This server refuses TIME inside scripts (some managed services do): set "
            "DJANGO_RL['CLOCK'] = 'app' to pass this host's time to the scripts "
            f"({doc_url('settings')} says what that costs)."
        )
    return Error(
        f"Redis for rate limiting ({where}) {reply.cause}: the {algorithm} algorithm (policy "
        f"{policy!r}) failed a trial decision ({type(exc).__name__}: {message})",
        hint=f"{hint} {_SEE}",
        id="django_rl.E071",
    )


def _eviction_messages(where: str, scratch: RedisNode) -> list[CheckMessage]:
    try:
        reply = scratch.client.config_get("maxmemory-policy")
    except ResponseError as exc:
        return [
            Info(
                f"Redis for rate limiting ({where}) does not let this connection read its "
                f"maxmemory-policy ({type(exc).__name__}: {exc})",
                hint="Make sure it is 'noeviction' (a managed service shows it in its "
                "settings): a policy that evicts keys with a TTL deletes live counters, and "
                f"their clients start again from zero. {_SEE}",
                id="django_rl.I070",
            )
        ]
    values: dict[Any, Any] = dict(reply)
    value = values.get("maxmemory-policy", values.get(b"maxmemory-policy", ""))
    policy = value.decode() if isinstance(value, bytes) else str(value)
    if not policy or policy in SAFE_EVICTION:
        return []
    return [
        Warning(
            f"Redis for rate limiting ({where}) has maxmemory-policy {policy!r}, which evicts "
            "keys that have a TTL before they expire once maxmemory is reached: an evicted "
            "counter lets its client start again from zero (over-admission)",
            hint="Set maxmemory-policy to 'noeviction' (then decisions follow fail_open at "
            "maxmemory, logged as out of memory, until memory frees), or give rate limiting a "
            f"Redis of its own. {_SEE}",
            id="django_rl.W070",
        )
    ]


def _unreachable(where: str, exc: RedisError) -> CheckMessage:
    message = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, AuthenticationError) or "WRONGPASS" in str(exc) or "NOAUTH" in str(exc):
        return Error(
            f"Redis for rate limiting ({where}) refuses this connection's credentials ({message})",
            hint="Check the user name and password in the alias' LOCATION "
            "(redis://USER:PASSWORD@host:port/0) or its OPTIONS['PASSWORD']. "
            f"See {doc_url('settings', 'tls-and-passwords')}.",
            id="django_rl.E072",
        )
    if _is_tls_failure(exc):
        return Error(
            f"Redis for rate limiting ({where}) could not be reached over TLS ({message})",
            hint="Check that the LOCATION is rediss:// on the server's TLS port, and that "
            "OPTIONS['CONNECTION_POOL_KWARGS']['ssl_ca_certs'] names the CA that signed the "
            f"server's certificate. See {doc_url('settings', 'tls-and-passwords')}.",
            id="django_rl.E073",
        )
    return Warning(
        f"Redis for rate limiting ({where}) could not be reached ({message}); "
        "its version, eviction policy and permissions were not checked",
        hint=f"Run manage.py check where Redis is up to check them. {_SEE}",
        id="django_rl.W071",
    )


def _is_tls_failure(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError) or "SSL" in str(seen) or "certificate" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
