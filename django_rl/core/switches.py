"""Whether rate limits are off in this process: ``django_rl.testing.rate_limits_disabled``.

One switch for the whole process (every thread), read by the one decision
(``Policy._decide``: no limit applies, nothing counted, no Redis), by
``Policy.peek``, by the drop-ins' own counting, and by the process's
background threads that talk to Redis (the overrides' loader, the history's
writer), so that no Redis command is sent while it is on.

It counts how many holders turned it on (nested blocks, several threads):
limits are off while any holder has not turned it back.
"""

from __future__ import annotations

import threading


class LimitsSwitch:
    """Limits off while :attr:`off` is true; thread-safe.

    :ivar off: read on every decision (an attribute read, no call); only
        :meth:`turn_off` and :meth:`turn_back` change it, under a lock.
    """

    __slots__ = ("_holders", "_lock", "off")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self.off = False

    def turn_off(self) -> None:
        """Turn every limit off, until each :meth:`turn_off` is matched by a :meth:`turn_back`."""
        with self._lock:
            self._holders += 1
            self.off = True

    def turn_back(self) -> None:
        """Undo one :meth:`turn_off`; limits are back when no holder is left.

        :raises RuntimeError: if no :meth:`turn_off` is left to undo.
        """
        with self._lock:
            if self._holders == 0:
                raise RuntimeError("rate limits were not turned off")
            self._holders -= 1
            self.off = self._holders > 0

    @property
    def holders(self) -> int:
        """Return how many holders keep limits off now."""
        return self._holders


#: The process's one switch.
LIMITS = LimitsSwitch()

__all__ = ["LIMITS", "LimitsSwitch"]
