"""django_rl's pytest plugin, registered by the ``pytest11`` entry point ``django_rl``.

Inert unless used: no autouse fixture, nothing done at start but for

* pytest-xdist: each worker writes its own keys, under ``<KEY_PREFIX>:<worker>``
  (``conf.use_key_suffix``), so workers that hit the same policy and
  identity never share state, and ``reset_rate_limits()`` in one worker
  touches only that worker's keys;
* ``--no-rate-limits``: every limit off for the whole run (as
  ``rate_limits_disabled``).

Fixtures: ``rate_limits_reset`` (every limit forgotten before the test and
after it) and ``rate_limits_disabled`` (limits off during the test).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from django_rl.conf import use_key_suffix
from django_rl.core.switches import LIMITS
from django_rl.testing import rate_limits_reset
from django_rl.testing.limits import RateLimitsDisabled

#: The option's name on the command line.
OPTION = "--no-rate-limits"


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("django_rl", "django_rl rate limits")
    group.addoption(
        OPTION,
        action="store_true",
        default=False,
        dest="django_rl_no_rate_limits",
        help="turn every django_rl rate limit off for the whole run (no Redis command)",
    )


def worker_name(config: Any) -> str | None:
    """Return the pytest-xdist worker this process is (``"gw0"``), or ``None``."""
    workerinput = getattr(config, "workerinput", None)
    if isinstance(workerinput, dict) and workerinput.get("workerid"):
        return str(workerinput["workerid"])
    return os.environ.get("PYTEST_XDIST_WORKER") or None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: Any) -> None:
    worker = worker_name(config)
    if worker is not None:
        use_key_suffix(worker)
    if config.getoption("django_rl_no_rate_limits", False):
        LIMITS.turn_off()
        config._django_rl_limits_off = True


def pytest_unconfigure(config: Any) -> None:
    if getattr(config, "_django_rl_limits_off", False):
        config._django_rl_limits_off = False
        LIMITS.turn_back()


@pytest.fixture(name="rate_limits_disabled")
def rate_limits_disabled_fixture() -> Iterator[None]:
    """Every rate limit off during the test (``django_rl.testing.rate_limits_disabled``)."""
    with RateLimitsDisabled():
        yield


__all__ = ["rate_limits_disabled_fixture", "rate_limits_reset", "worker_name"]
