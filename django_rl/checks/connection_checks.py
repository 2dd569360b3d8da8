"""Warnings about the rate limiter's connection: what bounds a decision while Redis is down.

A decision waits for Redis at most one socket timeout, so that a dead or hung
Redis costs each request a known, short delay. Three settings can break that
bound without an error anywhere; each gets a warning (``manage.py check``):

=============== ==========================================================
id              problem
=============== ==========================================================
django_rl.W031  the connection has no socket timeout: a hung Redis hangs
                every rate-limited request
django_rl.W032  the connection retries failed calls: one decision can take
                several socket timeouts plus back-off
django_rl.W033  another alias has the same LOCATION but other OPTIONS:
                django-redis keeps one pool per URL, so the alias that
                connects first decides the timeouts of both
=============== ==========================================================

The settings are read, not the live pool: creating the pool here would
decide, as a side effect of running checks, which alias' OPTIONS a shared
pool gets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django_rl.backends.redis import is_cluster_alias
from django_rl.backends.redis_py import retries
from django_rl.checks.validation import Problem
from django_rl.docs_urls import doc_url

_SEE = f"See {doc_url('reliability', 'the-connection-timeouts-no-retries-a-pool-of-its-own')}."


def connection_warnings(alias: str, caches: Mapping[str, Any]) -> list[Problem]:
    """Return the W03x problems of ``caches[alias]``, a django-redis cache."""
    config = caches[alias]
    kwargs = pool_kwargs(config)
    if kwargs is None:
        return []  # a LOCATION redis-py cannot parse fails loudly on first use
    problems = []
    if not kwargs.get("socket_timeout"):
        problems.append(
            Problem(
                "django_rl.W031",
                f"CACHES[{alias!r}] sets no socket timeout: while Redis hangs (a paused "
                "or overloaded server, a network partition) every rate-limited request "
                "waits for it, without end",
                "Set 'OPTIONS': {'SOCKET_CONNECT_TIMEOUT': 0.1, 'SOCKET_TIMEOUT': 0.1} on "
                f"the cache DJANGO_RL['CONNECTION'] names. {_SEE}",
            )
        )
    retries = retry_count(kwargs)
    # A cluster's decisions use node connections that never retry: these
    # options reach only RedisCluster's own calls (the Django cache's).
    if retries and not is_cluster_alias(config):
        times = "forever" if retries < 0 else "once" if retries == 1 else f"{retries} times"
        problems.append(
            Problem(
                "django_rl.W032",
                f"CACHES[{alias!r}] retries a failed Redis call {times}: while Redis is "
                "down one decision can take several socket timeouts plus back-off",
                "Give rate limiting its own CACHES alias without 'retry', "
                f"'retry_on_timeout' or 'retry_on_error'. {_SEE}",
            )
        )
    for other, other_config in caches.items():
        # The pools django-redis shares are its own: only another alias of
        # the same backend can share one.
        if other == alias or not isinstance(other_config, Mapping):
            continue
        if other_config.get("BACKEND") != config.get("BACKEND"):
            continue
        if _first_url(other_config.get("LOCATION")) != _first_url(config.get("LOCATION")):
            continue
        if other_config.get("OPTIONS", {}) != config.get("OPTIONS", {}):
            problems.append(
                Problem(
                    "django_rl.W033",
                    f"CACHES[{alias!r}] and CACHES[{other!r}] have the same LOCATION but "
                    "different OPTIONS: django-redis keeps one connection pool per URL, so "
                    "whichever alias connects first sets the timeouts and retries of both",
                    f"Make CACHES[{alias!r}]['LOCATION'] differ, e.g. end it with "
                    f"'?client_name=django_rl' (which also names its connections). {_SEE}",
                )
            )
    return problems


def pool_kwargs(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """Return the keyword arguments django-redis gives the pool of this cache.

    django-redis passes ``SOCKET_TIMEOUT`` and ``SOCKET_CONNECT_TIMEOUT`` when
    they are truthy, then ``CONNECTION_POOL_KWARGS``; redis-py's ``from_url``
    lets the URL's query string override both. ``None`` when the URL does
    not parse.
    """
    from redis.connection import parse_url

    options = config.get("OPTIONS", {})
    kwargs: dict[str, Any] = {}
    for option in ("SOCKET_TIMEOUT", "SOCKET_CONNECT_TIMEOUT"):
        if options.get(option):
            kwargs[option.lower()] = options[option]
    kwargs.update(options.get("CONNECTION_POOL_KWARGS", {}))
    url = _first_url(config.get("LOCATION"))
    try:
        kwargs.update(parse_url(url))  # type: ignore[no-untyped-call]
    except (ValueError, TypeError):
        return None
    return kwargs


def retry_count(kwargs: Mapping[str, Any]) -> int:
    """Return how often a connection made with ``kwargs`` retries a call (-1: forever).

    redis-py connections retry only when given a ``retry`` object, or
    ``retry_on_timeout`` / ``retry_on_error`` (then once). django-redis gives
    neither unless configured: a ``redis.Redis`` client's own default retry
    applies only to pools the client builds itself, not to django-redis's.
    """
    retry = kwargs.get("retry")
    if retry is not None:
        return retries(retry) or 0
    return 1 if kwargs.get("retry_on_timeout") or kwargs.get("retry_on_error") else 0


def _first_url(location: object) -> str:
    """Return the URL django-redis writes to: the first of a list or comma-separated string."""
    if isinstance(location, (list, tuple)):
        location = location[0] if location else ""
    return str(location or "").split(",")[0].strip()
