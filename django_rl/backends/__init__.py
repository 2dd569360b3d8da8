"""Where state lives. Only this package talks to Redis connections."""

from __future__ import annotations

from django_rl.backends.base import Backend
from django_rl.backends.node import RedisNode
from django_rl.backends.redis import RedisBackend, get_backend
from django_rl.backends.scripts import LuaScript

__all__ = ["Backend", "LuaScript", "RedisBackend", "RedisNode", "get_backend"]
