from __future__ import annotations

import re

import pytest

from django_rl.core.rates import Rate, RateError, parse_rate


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
        # DRF's words (its docs: "3/sec", "6/min", "1000/hour", "1/day"), singular and plural.
        ("3/sec", 3, 1_000, "3/s"),
        ("3/secs", 3, 1_000, "3/s"),
        ("3/second", 3, 1_000, "3/s"),
        ("3/seconds", 3, 1_000, "3/s"),
        ("6/min", 6, 60_000, "6/m"),
        ("6/mins", 6, 60_000, "6/m"),
        ("6/minute", 6, 60_000, "6/m"),
        ("6/minutes", 6, 60_000, "6/m"),
        ("1000/hour", 1000, 3_600_000, "1000/h"),
        ("1000/hours", 1000, 3_600_000, "1000/h"),
        ("1/day", 1, 86_400_000, "1/d"),
        ("1/days", 1, 86_400_000, "1/d"),
        # Weeks: written back in days, so a rate's keys do not change with how it is written.
        ("5/w", 5, 604_800_000, "5/7d"),
        ("5/week", 5, 604_800_000, "5/7d"),
        ("5/2weeks", 5, 1_209_600_000, "5/14d"),
        ("5/52w", 5, 52 * 604_800_000, "5/364d"),
        # A multiplier goes with every unit.
        ("100/10min", 100, 600_000, "100/10m"),
        ("5/2hours", 5, 7_200_000, "5/2h"),
        # No unit: seconds (django-ratelimit's "100/10").
        ("100/10", 100, 10_000, "100/10s"),
        ("5/60", 5, 60_000, "5/m"),
        ("1/1", 1, 1_000, "1/s"),
        ("1/31622400", 1, 31_622_400_000, "1/366d"),
        # A count of 0 denies every request.
        ("0/m", 0, 60_000, "0/m"),
        ("0/10", 0, 10_000, "0/10s"),
        ("00/day", 0, 86_400_000, "0/d"),
    ],
)
def test_valid_rates(text, limit, period_ms, normalized):
    rate = parse_rate(text)
    assert rate == Rate(limit=limit, period_ms=period_ms)
    assert str(rate) == normalized
    assert rate.period == period_ms / 1000
    assert rate.denies_all is (limit == 0)
    assert parse_rate(normalized) == rate


UNITS = (
    "use s, sec, second, m, min, minute, h, hour, d, day, w, week (plurals too), "
    "or no unit for seconds ('100/10')"
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "5/mango",
            f"rate '5/mango' has an unknown period unit 'mango' (whole words are read, "
            f"not the first letter); {UNITS}",
        ),
        # DRF reads "5/minutes" by its first letter, so "5/mxyz" and "5/month" are 5/m there.
        ("5/mxyz", "unknown period unit 'mxyz' (whole words are read, not the first letter)"),
        ("5/month", "unknown period unit 'month' (whole words are read"),
        ("5/hr", "unknown period unit 'hr' (whole words are read"),
        ("5/year", f"rate '5/year' has an unknown period unit 'year'; {UNITS}"),
        ("5/M", f"rate '5/M' has an unknown period unit 'M' (units are lower case); {UNITS}"),
        ("5/Minute", "unknown period unit 'Minute' (units are lower case)"),
        ("5/SEC", "unknown period unit 'SEC' (units are lower case)"),
        # django-ratelimit reads "5/" as 5 per second: too easy a slip to guess at.
        ("5/", "rate '5/' has no period; write e.g. '5/m', or '5/10' for 5 per 10 seconds"),
        ("5/0", "must have a period between 1s and 366d"),
        ("5/31622401", "must have a period between 1s and 366d"),
        ("5/53w", "must have a period between 1s and 366d"),
        ("5/m10", "is not of the form '<count>/<period>', e.g. '5/m', '100/10m' or '1000/hour'"),
        ("5/10 m", "is not of the form '<count>/<period>', e.g. '5/m', '100/10m' or '1000/hour'"),
        ("5/1.5m", "is not of the form '<count>/<period>', e.g. '5/m', '100/10m' or '1000/hour'"),
        ("five/m", "is not of the form '<count>/<period>', e.g. '5/m', '100/10m' or '1000/hour'"),
        ("5 / m", "is not of the form"),
        ("5m", "is not of the form"),
        ("-5/m", "is not of the form"),
        ("5/-1m", "is not of the form"),
        ("", "is not of the form"),
        ("5000000000/m", "must allow at most 1,000,000,000 hits"),
        ("5/0s", "must have a period between 1s and 366d"),
        ("5/367d", "must have a period between 1s and 366d"),
        ("1000000001/m", "must allow at most 1,000,000,000 hits"),
        ("5/31622401s", "must have a period between 1s and 366d"),
        (5, "rate must be a string"),
        (None, "rate must be a string"),
    ],
)
def test_invalid_rates(text, message):
    with pytest.raises(RateError, match=re.escape(message)):
        parse_rate(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "9" * 5000 + "/m",
            f"rate '{'9' * 27}...{'9' * 26}/m' must allow at most 1,000,000,000 hits",
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
            f"'{'x' * 27}...{'x' * 28}'; {UNITS}",
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
