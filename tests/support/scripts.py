"""Algorithm scripts for tests that pass them times of their own choosing.

Such a test runs a script at chosen times (the time argument that
``CLOCK: "app"`` passes), while the server expires keys by its own clock: a
TTL of 1 ms (a few hits ahead at a rate of a billion a second) can end
between two calls that are 0 ms apart for the script, and a machine that
stalls for a second can end a TTL of a second. :func:`kept` returns the
script with its key's TTL removed in the same run, so that the state is
left to the arithmetic under test; TTLs are tested on the server's clock.
"""

from __future__ import annotations

#: The last statement of every algorithm's Lua function begins so.
RETURN = "\n  return {allowed"


def kept(source: str) -> str:
    """Return ``source`` with ``PERSIST`` of its key (``key``, ``KEYS[1]``) before it returns."""
    if source.count(RETURN) != 1:
        raise ValueError("the script has no single final 'return {allowed ...'")
    keep = "\nif redis.call('EXISTS', key) == 1 then redis.call('PERSIST', key) end"
    return source.replace(RETURN, keep + RETURN)
