"""Values quoted in error messages: short, and never an error of their own."""

from __future__ import annotations

import pytest

from django_rl.core.reprs import short_repr


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        pytest.param("5/m", "'5/m'", id="short str"),
        pytest.param(-1, "-1", id="int"),
        pytest.param(None, "None", id="None"),
        pytest.param(True, "True", id="bool"),
        pytest.param(1.5, "1.5", id="float"),
        pytest.param({"rate": "5/m"}, "{'rate': '5/m'}", id="dict"),
        pytest.param("x" * 1000, f"'{'x' * 27}...{'x' * 28}'", id="long str"),
        pytest.param(10**5000, "<a whole number of about 5,001 digits>", id="huge int"),
        pytest.param(-(10**5000), "<a negative whole number of about 5,001 digits>", id="negative"),
        pytest.param(10**4299, f"1{'0' * 27}...{'0' * 29}", id="4300 digits"),
        pytest.param([1, 10**5000], "[1, <a whole number of about 5,001 digits>]", id="nested"),
        pytest.param(list(range(20)), "[0, 1, 2, 3, 4, 5, ...]", id="long list"),
    ],
)
def test_short_repr(value, shown):
    assert short_repr(value) == shown


def test_an_object_whose_repr_raises_is_shown_by_its_type():
    assert short_repr(BadRepr()).startswith("<BadRepr instance at 0x")
