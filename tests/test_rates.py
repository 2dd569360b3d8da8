from __future__ import annotations

import pytest

from django_rl.rates import Rate, RateError, parse_rate


@pytest.mark.parametrize(
    ("text", "limit", "period_ms", "normalized"),
    [
        ("5/s", 5, 1_000, "5/s"),
        ("5/m", 5, 60_000, "5/m"),
        ("1000/h", 1000, 3_600_000, "1000/h"),
        ("3/d", 3, 86_400_000, "3/d"),
        ("100/10m", 100, 600_000, "100/10m"),
        ("1/60s", 1, 60_000, "1/m"),
        ("7/1h", 7, 3_600_000, "7/h"),
        ("1000000000/31622400s", 1_000_000_000, 31_622_400_000, "1000000000/366d"),
    ],
)
def test_valid_rates(text, limit, period_ms, normalized):
    rate = parse_rate(text)
    assert rate == Rate(limit=limit, period_ms=period_ms)
    assert str(rate) == normalized
    assert rate.period == period_ms / 1000


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("5/mango", "unknown period unit 'mango'"),
        ("5/min", "unknown period unit 'min'"),
        ("5/M", "unknown period unit 'M'"),
        ("5/", "unknown period unit ''"),
        ("five/m", "is not of the form '<count>/<period>'"),
        ("5 / m", "is not of the form"),
        ("5m", "is not of the form"),
        ("-5/m", "is not of the form"),
        ("5/-1m", "is not of the form"),
        ("", "is not of the form"),
        ("0/m", "must allow between 1 and 1,000,000,000 hits"),
        ("5000000000/m", "must allow between 1 and"),
        ("5/0s", "must have a period between 1s and 366d"),
        ("5/367d", "must have a period between 1s and 366d"),
        ("1000000001/m", "must allow between 1 and 1,000,000,000 hits"),
        ("5/31622401s", "must have a period between 1s and 366d"),
        (5, "rate must be a string"),
        (None, "rate must be a string"),
    ],
)
def test_invalid_rates(text, message):
    with pytest.raises(RateError, match=message.replace("(", r"\(")):
        parse_rate(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "9" * 5000 + "/m",
            f"rate '{'9' * 27}...{'9' * 26}/m' must allow between 1 and 1,000,000,000 hits",
            id="count",
        ),
        pytest.param(
            "5/" + "9" * 5000 + "s",
            f"rate '5/{'9' * 25}...{'9' * 27}s' must have a period between 1s and 366d",
            id="multiplier",
        ),
        pytest.param(
            10**5000,
            "rate must be a string such as '5/m', not <a whole number of about 5,001 digits>",
            id="int",
        ),
        pytest.param(
            "5/" + "x" * 5000,
            f"rate '5/{'x' * 25}...{'x' * 28}' has an unknown period unit "
            f"'{'x' * 27}...{'x' * 28}'; use s, m, h or d (optionally with a multiplier, "
            "e.g. '100/10m')",
            id="unit",
        ),
    ],
)
def test_rates_of_thousands_of_characters_are_refused_in_a_short_message(text, message):
    # More digits than Python turns into an int (4,300) are out of range, not
    # a ValueError; the message quotes the rate's start and end only.
    with pytest.raises(RateError) as info:
        parse_rate(text)
    assert str(info.value) == message


def test_leading_zeros_are_no_digits():
    assert parse_rate("0" * 5000 + "5/" + "0" * 5000 + "1m") == Rate(limit=5, period_ms=60_000)
