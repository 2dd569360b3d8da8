"""Django Ninja's test setup, for its own throttling tests and ours.

Ninja refuses a second ``NinjaAPI`` of one URL namespace unless
``NINJA_SKIP_REGISTRY`` is set (its own conftest sets it); its async tests
carry pytest-asyncio's ``asyncio`` mark, which here runs the coroutine on a
new event loop (the suite has no pytest-asyncio).
"""

from __future__ import annotations

import asyncio
import inspect
import os
from typing import Any

import pytest

os.environ["NINJA_SKIP_REGISTRY"] = "yes"


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: Any) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    asyncio.run(pyfuncitem.obj(**{name: pyfuncitem.funcargs[name] for name in names}))
    return True
