"""Values in error messages: a ``repr`` that stays short and never raises.

A setting can hold anything, and check messages and exceptions quote it. A
plain ``repr`` can fail there: Python refuses to write an int of more than
4,300 digits as text (``ValueError``, its guard against quadratic-time
conversions), which would turn a clear check error into a crash of
``manage.py check``. It can also be huge: a rate string of a megabyte would
be quoted whole. :func:`short_repr` bounds both.
"""

from __future__ import annotations

import math
import reprlib

#: Characters of a quoted string or other value kept in a message (reprlib
#: keeps its start and end, with ``...`` between).
MAX_CHARACTERS = 60


class _ShortRepr(reprlib.Repr):
    def __init__(self) -> None:
        super().__init__()
        self.maxstring = MAX_CHARACTERS
        self.maxother = MAX_CHARACTERS
        self.maxlong = MAX_CHARACTERS

    def repr_int(self, x: int, level: int) -> str:
        try:
            return super().repr_int(x, level)
        except ValueError:
            # Too many digits to write (sys.get_int_max_str_digits()); say how
            # many instead, estimated from the bits, which costs nothing.
            digits = math.floor(x.bit_length() * math.log10(2)) + 1
            sign = "a negative" if x < 0 else "a"
            return f"<{sign} whole number of about {digits:,} digits>"


_SHORT = _ShortRepr()


def short_repr(value: object) -> str:
    """Return ``repr(value)`` for a message: at most about 60 characters per value.

    Strings and numbers keep their start and end; containers show their
    first few items, nested a few levels; an int too long to write says how
    many digits it has; an object whose ``repr`` raises is shown by its type.
    Never raises.
    """
    return _SHORT.repr(value)


def plural(count: int, singular: str, many: str = "") -> str:
    """Return the noun that agrees with ``count``: ``singular`` for 1, else ``many`` (or +s)."""
    return singular if count == 1 else many or singular + "s"


def counted(count: int, singular: str, many: str = "") -> str:
    """Return ``count`` with its noun, for messages: ``"1 entry"``, ``"1,024 entries"``."""
    return f"{count:,} {plural(count, singular, many)}"
