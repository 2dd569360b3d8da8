"""Every test of usage starts with nothing logged about policies left out."""

from __future__ import annotations

import pytest

from django_rl.policies import usage


@pytest.fixture(autouse=True)
def _forget_logged_policies() -> None:
    usage._logged.clear()
