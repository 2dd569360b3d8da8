"""Commands encoded in RESP by django_rl itself, for the kept connection's short path.

redis-py encodes every argument of every command through its encoder and
packer: a few µs per decision. A decision's commands are few and always of
the same shapes (a key, whole numbers, short flags), so they are encoded
here, byte for byte as redis-py encodes them with its default UTF-8 encoding.
Only for str, int and bytes arguments; anything else is a ``TypeError``, and
the caller goes redis-py's way.
"""

from __future__ import annotations

from collections.abc import Iterable

Argument = int | str | bytes


def _encode_bulk(value: Argument) -> bytes:
    if isinstance(value, bytes):  # a reply passed back (refund.lua's): as it came
        data = value
    elif isinstance(value, str):
        data = value.encode()
    elif type(value) is int:  # not bool: redis-py refuses bools, and so do we
        data = b"%d" % value
    else:
        raise TypeError(f"cannot encode {type(value).__name__} as a Redis argument")
    return b"$%d\r\n%b\r\n" % (len(data), data)


#: The arguments nearly every call repeats (costs, counts, "1"/"0" flags, the
#: empty time of the server's clock, the commands' names), encoded once.
_COMMON: dict[Argument, bytes] = {
    value: _encode_bulk(value)
    for value in (
        "", *range(101), *map(str, range(101)),
        "EVALSHA", "INCRBY", "DECRBY", "PEXPIREAT", "PEXPIRE", "PTTL", "NX",
    )
}  # fmt: skip


def bulk(value: Argument) -> bytes:
    """Return ``value`` as a RESP bulk string (text as UTF-8, as redis-py encodes it).

    :raises TypeError: for a value that is not str, int (not bool) or bytes.
    """
    if type(value) is bool:
        raise TypeError("cannot encode bool as a Redis argument")
    found = _COMMON.get(value)
    return _encode_bulk(value) if found is None else found


def command(args: Iterable[Argument]) -> bytes:
    """Return the command ``args`` (its name first) as a RESP array of bulk strings.

    :raises TypeError: for an argument :func:`bulk` cannot encode.
    """
    parts = [bulk(arg) for arg in args]
    return b"*%d\r\n%b" % (len(parts), b"".join(parts))


#: Commands without arguments, encoded once.
MULTI = command(["MULTI"])
EXEC = command(["EXEC"])
ASKING = command(["ASKING"])


class Slot:
    """A variable argument of a :class:`Transaction`, encoded on each call.

    :param kept: keep the last value's encoding (for a value that changes
        seldom, such as a window's end: encoded once a window, not per call).
    """

    __slots__ = ("kept", "name")

    def __init__(self, name: str, *, kept: bool = False) -> None:
        self.name = name
        self.kept = kept

    def __repr__(self) -> str:
        return f"Slot({self.name!r})"


class Transaction:
    """``MULTI``, commands of fixed shape, ``EXEC``: fixed bytes encoded once, slots per call.

    ``Transaction([("INCRBY", KEY, COST), ("PTTL", KEY)])`` with ``KEY`` and
    ``COST`` :class:`Slot` s; :meth:`encode` gives it in RESP for the slots'
    values, byte for byte what :func:`command` makes of each command
    (``tests/test_resp.py``), in one formatting: the fixed bytes were joined
    when it was made. A slot may stand in several places (a key): its value
    is encoded once per call. ``KeptConnectionClient.run_transaction`` runs it.
    """

    def __init__(self, commands: Iterable[Iterable[Argument | Slot]]) -> None:
        self.commands = tuple(tuple(each) for each in commands)
        slots: list[Slot] = []
        order: list[int] = []
        parts: list[bytes] = [MULTI]
        for each in self.commands:
            parts.append(b"*%d\r\n" % len(each))
            for arg in each:
                if isinstance(arg, Slot):
                    if arg not in slots:
                        slots.append(arg)
                    order.append(slots.index(arg))
                    parts.append(b"%b")
                else:
                    parts.append(bulk(arg).replace(b"%", b"%%"))
        parts.append(EXEC)
        self.slots = tuple(slots)
        self._format = b"".join(parts)
        self._order = tuple(order)
        #: Per slot, its last value and that value's encoding (a kept slot's;
        #: each item replaced whole: threads read them without a lock).
        self._last: list[tuple[object, bytes]] = [(None, b"")] * len(slots)

    def encode(self, *values: Argument) -> bytes:
        """Return the transaction in RESP, ``values`` in the slots (in the order of :attr:`slots`).

        :raises TypeError: for a value :func:`bulk` cannot encode.
        """
        encoded: list[bytes] = []
        last = self._last
        for at, (slot, value) in enumerate(zip(self.slots, values, strict=True)):
            if slot.kept:
                seen = last[at]
                if seen[0] != value or type(seen[0]) is not type(value):
                    seen = last[at] = (value, bulk(value))
                encoded.append(seen[1])
            elif type(value) is str:  # a key, most often: encoded in one formatting
                data = value.encode()
                encoded.append(b"$%d\r\n%b\r\n" % (len(data), data))
            else:
                encoded.append(bulk(value))
        return self._format % tuple([encoded[at] for at in self._order])

    def filled(self, *values: Argument) -> list[tuple[Argument, ...]]:
        """Return the commands (without ``MULTI`` and ``EXEC``), ``values`` in the slots."""
        by_slot = dict(zip(self.slots, values, strict=True))
        return [
            tuple(by_slot[arg] if isinstance(arg, Slot) else arg for arg in each)
            for each in self.commands
        ]
