"""The websocket tests' consumers leave no trace on the rest of the suite.

``RateLimitMixin`` notes every consumer class for ``manage.py check``
(``contrib/channels_checks.CONSUMERS``); the test consumers name policies
only these tests define, so they are forgotten when this package is done,
and the checks of other tests never see them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from django_rl.contrib.channels_checks import CONSUMERS


@pytest.fixture(scope="package", autouse=True)
def _forget_test_consumers() -> Iterator[None]:
    yield
    for consumer in list(CONSUMERS):
        if consumer.__module__.startswith("tests."):
            CONSUMERS.discard(consumer)
