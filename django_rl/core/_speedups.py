"""The speed-ups of ``core/`` that rely on how another library lays its objects out.

One place to audit when Python (or a library) is upgraded: each speed-up
says what layout it relies on, checks that layout before using it, and
falls back to a public, slower way that gives the same result when the
layout is not as expected. ``tests/core/test_speedups.py`` fails loudly when a
layout changes (so the fallback is never used unnoticed) and proves each
fallback right.

* :func:`slot_setters`: writes to a frozen, slotted dataclass's fields
  (``Decision``) through each slot's own member descriptor, past the
  frozen class's ``__setattr__``: CPython's layout of ``__slots__``
  (``types.MemberDescriptorType`` in the class's ``__dict__``) and
  ``dataclasses``' ``slots=True`` (one slot per field, in field order).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import MemberDescriptorType
from typing import Any

#: Writes one field's value on an instance: ``setter(instance, value)``.
Setter = Callable[[Any, Any], None]


def slot_setters(cls: type, names: Sequence[str]) -> tuple[Setter, ...]:
    """Return a setter per name of ``names`` that writes that field of a ``cls`` instance.

    For an ``__init__`` of a frozen dataclass that is cheaper than the one
    ``dataclass`` writes: that one calls ``object.__setattr__(self, name,
    value)`` per field, which looks the name up on the type each time
    (about 1 µs for ``Decision``'s 11 fields); a slot's member descriptor's
    ``__set__`` writes the slot directly, in about half of that. Either way
    the instance stays frozen: only these setters write past
    ``__setattr__``.

    The fast setters are returned when ``cls.__slots__`` is exactly
    ``names`` and each name is a member descriptor in ``cls.__dict__`` (how
    CPython lays out ``@dataclass(slots=True)``); otherwise (another
    interpreter, a class without slots) ``object.__setattr__`` per name:
    the same result, at the dataclass's own price.
    """
    if uses_slot_descriptors(cls, names):
        return tuple(cls.__dict__[name].__set__ for name in names)
    return tuple(_object_setter(name) for name in names)


def uses_slot_descriptors(cls: type, names: Sequence[str]) -> bool:
    """Return whether :func:`slot_setters` can use ``cls``'s slot descriptors for ``names``."""
    slots = cls.__dict__.get("__slots__")
    if slots is None or tuple(slots) != tuple(names):
        return False
    return all(isinstance(cls.__dict__.get(name), MemberDescriptorType) for name in names)


def _object_setter(name: str) -> Setter:
    """Return a setter of ``name`` by ``object.__setattr__`` (a frozen dataclass's way)."""

    def setter(instance: Any, value: Any) -> None:
        object.__setattr__(instance, name, value)

    return setter
