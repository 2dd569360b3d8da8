"""Where state lives. Only this package talks to Redis connections."""

from __future__ import annotations

from django_rl.backends.redis import LuaScript, RedisBackend, get_backend, run_reads

__all__ = ["LuaScript", "RedisBackend", "get_backend", "run_reads"]
