"""Context managers that are also decorators: of functions, ``TestCase`` methods and classes.

:class:`Switched` is what ``rate_limits_disabled()`` and ``override_policy()``
return. Used as

* ``with switched:`` (a block); the same object may be entered by several
  threads at once, and nested: each entry is undone by its own exit;
* ``@switched`` on a function (sync or ``async def``), a test method or a
  pytest test function (its signature, and so its fixtures, kept): on for
  each call, undone after it however it ends;
* ``@switched`` on a ``unittest.TestCase`` class (Django's ``TestCase`` and
  ``SimpleTestCase`` included): on from before ``setUp`` of each test until
  its cleanups (``addCleanup``: also when the test or ``setUp`` fails);
* ``@switched`` on another class (a pytest test class): each of its
  ``test*`` methods decorated.
"""

from __future__ import annotations

import functools
import inspect
import threading
import unittest
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class Switched:
    """Something turned on by :meth:`enable` and undone by :meth:`disable`; see the module."""

    def __init__(self) -> None:
        self._entered = threading.local()

    def enable(self) -> object:
        """Turn it on; return what :meth:`disable` takes to undo exactly this."""
        raise NotImplementedError

    def disable(self, token: object) -> None:
        """Undo the :meth:`enable` that returned ``token``."""
        raise NotImplementedError

    # -- a context manager ---------------------------------------------------

    def __enter__(self) -> Switched:
        token = self.enable()
        stack: list[object] | None = getattr(self._entered, "tokens", None)
        if stack is None:
            stack = self._entered.tokens = []
        stack.append(token)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.disable(self._entered.tokens.pop())

    # -- a decorator -----------------------------------------------------------

    def __call__(self, decorated: T) -> T:
        if isinstance(decorated, type):
            return self._decorate_class(decorated)  # type: ignore[return-value]
        if callable(decorated):
            return self._decorate_callable(decorated)  # type: ignore[return-value]
        raise TypeError(f"{type(self).__name__} decorates functions and classes, not {decorated!r}")

    def _decorate_callable(self, func: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def awaited(*args: Any, **kwargs: Any) -> Any:
                token = self.enable()
                try:
                    return await func(*args, **kwargs)
                finally:
                    self.disable(token)

            return awaited

        @functools.wraps(func)
        def called(*args: Any, **kwargs: Any) -> Any:
            token = self.enable()
            try:
                return func(*args, **kwargs)
            finally:
                self.disable(token)

        return called

    def _decorate_class(self, cls: type) -> type:
        if issubclass(cls, unittest.TestCase):
            set_up = cls.setUp
            switched = self

            def setUp(test: unittest.TestCase) -> None:
                # Cleanups run after tearDown, also when the test or setUp fails.
                test.addCleanup(switched.disable, switched.enable())
                set_up(test)

            cls.setUp = functools.wraps(set_up)(setUp)  # type: ignore[method-assign,assignment]
            return cls
        for name, value in list(vars(cls).items()):
            if name.startswith("test") and callable(value):
                setattr(cls, name, self._decorate_callable(value))
        return cls


__all__ = ["Switched"]
