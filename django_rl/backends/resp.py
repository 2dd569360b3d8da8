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
