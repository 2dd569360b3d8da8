"""The task tests' limited tasks leave no trace on the rest of the suite.

``manage.py check`` looks at every ``RateLimitedTask`` subclass and the
tasks of every Celery app still loaded; these tests' tasks name policies
only they define. When the package is done, every app is finalized (a task
an app only promised gets its class then) and every subclass emptied, so the
checks of later tests see none of them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.tasks.test_celery_eager import emptied


@pytest.fixture(scope="package", autouse=True)
def _tasks_emptied_after() -> Iterator[None]:
    yield
    emptied()
