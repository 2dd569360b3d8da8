"""The websocket tests' consumers leave no trace on the rest of the suite.

``RateLimitMixin`` notes every consumer class for ``manage.py check``
(``contrib/channels_checks.CONSUMERS``) when it is defined, and pytest
imports every test module (so ``tests/sites/consumers.py``) before any test
runs. The test consumers name policies only these tests define: once
collection is done they are set aside, noted again while this package's
tests run, and set aside after, so the checks of other tests never see them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from django_rl.contrib.channels_checks import CONSUMERS

_SET_ASIDE: set[type] = set()


def _set_aside() -> None:
    for consumer in list(CONSUMERS):
        if consumer.__module__.startswith("tests."):
            CONSUMERS.discard(consumer)
            _SET_ASIDE.add(consumer)


def pytest_collection_finish(session: Any) -> None:
    _set_aside()


@pytest.fixture(scope="package", autouse=True)
def _test_consumers_noted_here_only() -> Iterator[None]:
    CONSUMERS.update(_SET_ASIDE)
    yield
    _set_aside()
