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
    kind = type(value)
    if kind is str:  # a key, most often: encoded at once (a look-up costs as much)
        data = value.encode()  # type: ignore[union-attr]  # a str
        return b"$%d\r\n%b\r\n" % (len(data), data)
    if kind is bool:
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
    """A variable argument of a :class:`Transaction`: :data:`KEY`, or a value named here."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Slot({self.name!r})"


#: The key of a :class:`Transaction`'s commands (its first slot, encoded on every call).
KEY = Slot("key")

#: The most encodings of its values a :class:`Transaction` keeps.
MAX_VALUES = 64


class Transaction:
    """``MULTI``, commands of fixed shape, ``EXEC``: fixed bytes encoded once, slots per call.

    ``Transaction([("INCRBY", KEY, COST), ("PTTL", KEY)])``, ``COST`` a
    :class:`Slot`; :meth:`encode` gives it in RESP for the key and the other
    slots' values, byte for byte what :func:`command` makes of each command
    (``tests/backends/test_resp.py``). The other values are the same on
    nearly every call (a cost of 1, a window's end that changes once a
    window), so for each set of them a template is kept: every byte but the
    key's, which is the one formatting left per call (at most
    :data:`MAX_VALUES` templates, then they are all dropped).
    ``KeptConnectionClient.run_transaction`` runs it.
    """

    def __init__(self, commands: Iterable[Iterable[Argument | Slot]]) -> None:
        self.commands = tuple(tuple(each) for each in commands)
        slots: list[Slot] = [KEY]
        #: MULTI, the commands and EXEC: fixed bytes, and slots' indexes in :attr:`slots`.
        pieces: list[bytes | int] = [MULTI]
        for each in self.commands:
            pieces.append(b"*%d\r\n" % len(each))
            for arg in each:
                if isinstance(arg, Slot):
                    if arg not in slots:
                        slots.append(arg)
                    pieces.append(slots.index(arg))
                else:
                    pieces.append(bulk(arg))
        pieces.append(EXEC)
        #: :data:`KEY`, then the other slots in the order they first stand in.
        self.slots = tuple(slots)
        self._pieces = tuple(pieces)
        #: How many times the key stands in the commands.
        self._key_uses = pieces.count(0)
        self._templates: dict[tuple[Argument, ...], bytes] = {}

    def encode(self, key: str, values: tuple[Argument, ...]) -> bytes:
        """Return the transaction in RESP, ``key`` and ``values`` in the slots (:attr:`slots`).

        :raises TypeError: for a value :func:`bulk` cannot encode, or a wrong number of them.
        """
        template = self._templates.get(values)
        if template is None:
            template = self._template(values)
        data = key.encode()  # as bulk encodes a key, in one formatting
        return template % ((b"$%d\r\n%b\r\n" % (len(data), data),) * self._key_uses)

    def _template(self, values: tuple[Argument, ...]) -> bytes:
        """Return (and keep) the transaction's bytes for ``values``, ``%b`` where the key goes."""
        if len(values) != len(self.slots) - 1:
            raise TypeError(f"{len(self.slots) - 1} values expected, not {len(values)}")
        encoded = [bulk(value).replace(b"%", b"%%") for value in values]
        template = b"".join(
            (b"%b" if piece == 0 else encoded[piece - 1]) if type(piece) is int  # a slot
            else piece.replace(b"%", b"%%")  # type: ignore[union-attr]  # bytes
            for piece in self._pieces
        )  # fmt: skip
        kept = self._templates
        if len(kept) >= MAX_VALUES:
            kept.clear()  # (times and ends move on: old ones are not asked again)
        kept[values] = template
        return template

    def filled(self, key: str, values: tuple[Argument, ...]) -> list[tuple[Argument, ...]]:
        """Return the commands (no ``MULTI``, ``EXEC``), ``key`` and ``values`` in the slots."""
        by_slot = dict(zip(self.slots, (key, *values), strict=True))
        return [
            tuple(by_slot[arg] if isinstance(arg, Slot) else arg for arg in each)
            for each in self.commands
        ]
