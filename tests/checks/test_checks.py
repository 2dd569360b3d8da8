"""Every bad setting is reported by ``manage.py check`` with its id and a hint."""

from __future__ import annotations

import pytest
from django.core.checks import Error
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from django_rl.checks.system import check_settings

GOOD = {"algorithm": "fixed_window", "rate": "5/m"}
#: Every algorithm, as the hint of an unknown one lists them.
NAMES = "fixed_window, sliding_log, token_bucket, gcra, sliding_window, concurrency, quota"


def errors(settings, rl=None, urls="tests.sites.urls_without_limits", **overrides):
    settings.ROOT_URLCONF = urls
    if rl is not None:
        settings.DJANGO_RL = rl
    for name, value in overrides.items():
        setattr(settings, name, value)
    return check_settings()


def policies(**specs):
    return {"POLICIES": specs}


def test_the_test_settings_are_clean(settings):
    assert errors(settings, urls="tests.sites.urls") == []


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            {"algorithm": "leaky", "rate": "5/m"},
            Error(
                "DJANGO_RL['POLICIES']['p'] has an unknown algorithm 'leaky'",
                hint=f"Set 'algorithm' to one of {NAMES}.",
                id="django_rl.E006",
            ),
        ),
        (
            {"rate": "5/m"},
            Error(
                "DJANGO_RL['POLICIES']['p'] has no 'algorithm'",
                hint=f"Set 'algorithm' to one of {NAMES}.",
                id="django_rl.E006",
            ),
        ),
        (
            {"algorithm": "sliding_log", "rate": "5/mango"},
            Error(
                "DJANGO_RL['POLICIES']['p']: rate '5/mango' has an unknown period unit 'mango' "
                "(whole words are read, not the first letter); use s, sec, second, m, min, "
                "minute, h, hour, d, day, w, week (plurals too), or no unit for seconds "
                "('100/10')",
                hint=(
                    "Write e.g. '5/m', '100/10m', '1000/hour', '100/10' (per 10 s), "
                    "'0/m' (deny every request) or None (no limit)."
                ),
                id="django_rl.E007",
            ),
        ),
        (
            {"algorithm": "token_bucket", "rate": "1/s"},
            Error(
                "DJANGO_RL['POLICIES']['p'] lacks 'capacity', which token_bucket needs",
                hint="token_bucket takes capacity, rate.",
                id="django_rl.E008",
            ),
        ),
        (
            {"algorithm": "fixed_window"},
            Error(
                "DJANGO_RL['POLICIES']['p'] lacks 'rate', which fixed_window needs",
                hint="fixed_window takes rate.",
                id="django_rl.E008",
            ),
        ),
        (
            {"algorithm": "fixed_window", "rate": "5/m", "capacity": 3},
            Error(
                "DJANGO_RL['POLICIES']['p'] sets 'capacity', which fixed_window does not use",
                hint="fixed_window takes rate; remove the others.",
                id="django_rl.E009",
            ),
        ),
        (
            {"algorithm": "token_bucket", "rate": "1/s", "capacity": 0},
            Error(
                "DJANGO_RL['POLICIES']['p']: capacity must be between 1 and 1,000,000,000, not 0",
                hint="token_bucket takes capacity, rate.",
                id="django_rl.E010",
            ),
        ),
        (
            {"algorithm": "token_bucket", "rate": "1/s", "capacity": "3"},
            Error(
                "DJANGO_RL['POLICIES']['p']: capacity must be a whole number, not '3'",
                hint="token_bucket takes capacity, rate.",
                id="django_rl.E010",
            ),
        ),
        (
            {"algorithm": "fixed_window", "rate": "5/m", "key": "tests.nowhere.func"},
            Error(
                "DJANGO_RL['POLICIES']['p']: key 'tests.nowhere.func' could not be imported: "
                "No module named 'tests.nowhere'",
                hint="Use 'ip', 'user', 'user_or_ip', 'anon', 'header:<Name>', 'get:<name>', "
                "'post:<name>', a callable(request) -> str | None, or the dotted path of one.",
                id="django_rl.E011",
            ),
        ),
        (
            {"algorithm": "fixed_window", "rate": "5/m", "rat": "6/m"},
            Error(
                "DJANGO_RL['POLICIES']['p'] has unknown keys: 'rat'",
                hint="Policy keys are algorithm, anchor, block_for, burst, capacity, charge, "
                "costs, count_when, enforce_percent, escalate, fail_open, fallback_rate, key, "
                "limit, mode, period, rate, timeout, timezone. "
                "Check the spelling.",
                id="django_rl.E005",
            ),
        ),
        (
            {"algorithm": ["fixed_window"], "rate": "5/m"},
            Error(
                "DJANGO_RL['POLICIES']['p'] has an unknown algorithm ['fixed_window']",
                hint=f"Set 'algorithm' to one of {NAMES}.",
                id="django_rl.E006",
            ),
        ),
        (
            "5/m",
            Error(
                "DJANGO_RL['POLICIES']['p'] must be a dict, not str",
                hint="Write e.g. {'algorithm': 'sliding_log', 'rate': '5/m'}.",
                id="django_rl.E005",
            ),
        ),
    ],
)
def test_each_malformed_policy_has_its_error(settings, spec, expected):
    assert errors(settings, policies(p=spec)) == [expected]


@pytest.mark.parametrize(
    "rate", ["five/m", "5/0s", "5/mango", 5, "5/", "5/M", "5/mxyz", "5/0", "-1/m", "", 1.5]
)
def test_bad_rates_are_e007(settings, rate):
    found = errors(settings, policies(p={"algorithm": "fixed_window", "rate": rate}))
    assert [(e.id, e.hint) for e in found] == [
        (
            "django_rl.E007",
            "Write e.g. '5/m', '100/10m', '1000/hour', '100/10' (per 10 s), "
            "'0/m' (deny every request) or None (no limit).",
        )
    ]


def test_a_bad_policy_name(settings):
    found = errors(settings, policies(**{"log in": GOOD}))
    assert [(e.id, e.msg) for e in found] == [
        ("django_rl.E005", "DJANGO_RL['POLICIES']['log in']: bad policy name")
    ]


def test_several_problems_are_all_reported(settings):
    found = errors(
        settings,
        policies(
            a={"algorithm": "fixed_window", "rate": "5/x", "capacity": 2},
            b={"algorithm": "nope"},
        ),
    )
    assert [e.id for e in found] == ["django_rl.E009", "django_rl.E007", "django_rl.E006"]


@pytest.mark.parametrize(
    ("rl", "expected"),
    [
        ([], [("django_rl.E001", "settings.DJANGO_RL must be a dict, not list")]),
        (
            {"POLICY": {}},
            [("django_rl.E001", "settings.DJANGO_RL has unknown keys: 'POLICY'")],
        ),
        ({"KEY_PREFIX": "rl:*"}, [("django_rl.E002", "DJANGO_RL['KEY_PREFIX'] is 'rl:*'")]),
        ({"FAIL_OPEN": "yes"}, [("django_rl.E002", "DJANGO_RL['FAIL_OPEN'] is 'yes'")]),
        ({"NUM_PROXIES": -1}, [("django_rl.E002", "DJANGO_RL['NUM_PROXIES'] is -1")]),
        ({"POLICIES": []}, [("django_rl.E002", "DJANGO_RL['POLICIES'] is []")]),
        (
            {"DEFAULT_POLICY": "nope", "POLICIES": {}},
            [
                (
                    "django_rl.E012",
                    "DJANGO_RL['DEFAULT_POLICY'] is 'nope', which is not a policy",
                )
            ],
        ),
    ],
)
def test_top_level_problems(settings, rl, expected):
    assert [(e.id, e.msg) for e in errors(settings, rl)] == expected


def test_connection_alias_missing(settings):
    found = errors(settings, {"CONNECTION": "ratelimit"})
    assert [(e.id, e.msg) for e in found] == [
        (
            "django_rl.E003",
            "DJANGO_RL['CONNECTION'] is 'ratelimit', which is not in settings.CACHES",
        )
    ]


def test_connection_not_django_redis(settings):
    caches = {
        **settings.CACHES,
        "locmem": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    }
    found = errors(settings, {"CONNECTION": "locmem", "POLICIES": {}}, CACHES=caches)
    assert [(e.id, e.msg) for e in found] == [
        (
            "django_rl.E004",
            "CACHES['locmem'] uses 'django.core.cache.backends.locmem.LocMemCache', "
            "not a django-redis cache",
        )
    ]
    assert found[0].hint == (
        "django_rl runs on django-redis connections: set its BACKEND to "
        "'django_redis.cache.RedisCache'."
    )


def test_views_that_name_unknown_policies(settings):
    # tests.sites.urls decorates views with 'per_minute' and 'writes', and a DRF view
    # has throttle_scope 'per_minute'.
    found = errors(settings, policies(login=GOOD), urls="tests.sites.urls")
    assert sorted((e.id, e.msg) for e in found) == [
        (
            "django_rl.E013",
            f"view {view!r} names the rate-limit policy {name!r}, which does not exist",
        )
        for view, name in sorted(
            [
                ("tests.sites.views.LimitedAsyncClassView", "per_minute"),
                ("tests.sites.views.LimitedClassView", "per_minute"),
                ("tests.sites.views.MethodDecoratedView", "per_minute"),
                ("tests.sites.views.ScopedApiView", "per_minute"),
                ("tests.sites.views.limited", "per_minute"),
                ("tests.sites.views.limited_async", "per_minute"),
                ("tests.sites.views.writes_only", "writes"),
            ]
        )
    ]


def test_manage_py_check_fails_with_the_error(settings):
    settings.DJANGO_RL = policies(p={"algorithm": "fixed_window", "rate": "5/M"})
    with pytest.raises(SystemCheckError) as info:
        call_command("check")
    assert "(django_rl.E007) DJANGO_RL['POLICIES']['p']: rate '5/M' has an unknown" in str(
        info.value
    )


def test_manage_py_check_passes_on_good_settings(capsys):
    call_command("check")
    assert "no issues" in capsys.readouterr().out


def test_a_sliding_log_that_can_take_over_1_mb_per_identity_is_w020(settings):
    from django.core.checks import Warning

    found = errors(
        settings,
        policies(
            big={"algorithm": "sliding_log", "rate": "100000/h"},
            fits={"algorithm": "sliding_log", "rate": "8000/h"},
            bucket={"algorithm": "token_bucket", "capacity": 100_000, "rate": "100000/h"},
            window={"algorithm": "fixed_window", "rate": "100000/h"},
        ),
    )
    assert found == [
        Warning(
            "DJANGO_RL['POLICIES']['big']: a sliding_log of 100000/h keeps up to 100,000 "
            "entries per identity, about 12,000,000 bytes (12.0 MB) of Redis memory for each "
            "client at the limit",
            hint="Use token_bucket (about 120 bytes per identity, whatever the rate) or "
            "fixed_window, or a lower limit over a shorter period. If the memory is planned "
            "for, add 'django_rl.W020' to SILENCED_SYSTEM_CHECKS.",
            id="django_rl.W020",
        )
    ]


def test_manage_py_check_shows_w020_and_passes(settings, capsys):
    settings.ROOT_URLCONF = "tests.sites.urls_without_limits"
    settings.DJANGO_RL = policies(big={"algorithm": "sliding_log", "rate": "9000/m"})
    call_command("check")
    captured = capsys.readouterr()
    assert "(django_rl.W020)" in captured.err and "about 1,080,000 bytes (1.1 MB)" in captured.err
    assert captured.err.endswith("System check identified 1 issue (0 silenced).\n")


HUGE = 10**5000  # more digits than Python writes as text (4,300): repr() raises ValueError
SHOWN = "<a whole number of about 5,001 digits>"


@pytest.mark.parametrize(
    ("rl", "expected"),
    [
        pytest.param(
            policies(p={"algorithm": "fixed_window", "rate": "1" * 5000 + "/m"}),
            (
                "django_rl.E007",
                f"DJANGO_RL['POLICIES']['p']: rate '{'1' * 27}...{'1' * 26}/m' "
                "must allow at most 1,000,000,000 hits",
            ),
            id="rate",
        ),
        pytest.param(
            policies(p={"algorithm": "token_bucket", "rate": "1/s", "capacity": HUGE}),
            (
                "django_rl.E010",
                f"DJANGO_RL['POLICIES']['p']: capacity must be between 1 and 1,000,000,000, "
                f"not {SHOWN}",
            ),
            id="capacity",
        ),
        pytest.param(
            policies(p={**GOOD, "fail_open": -HUGE}),
            (
                "django_rl.E030",
                "DJANGO_RL['POLICIES']['p']['fail_open'] is "
                "<a negative whole number of about 5,001 digits>",
            ),
            id="fail_open",
        ),
        pytest.param(
            policies(p={**GOOD, "key": [HUGE]}),
            (
                "django_rl.E011",
                f"DJANGO_RL['POLICIES']['p']: key must be a non-empty string, not [{SHOWN}]",
            ),
            id="key",
        ),
        pytest.param(
            {"POLICIES": {HUGE: GOOD}},
            ("django_rl.E005", f"DJANGO_RL['POLICIES'][{SHOWN}]: bad policy name"),
            id="policy name",
        ),
        pytest.param(
            {"NUM_PROXIES": HUGE},
            ("django_rl.E002", f"DJANGO_RL['NUM_PROXIES'] is {SHOWN}"),
            id="NUM_PROXIES",
        ),
        pytest.param(
            {"DENY_CACHE_SIZE": HUGE},
            ("django_rl.E040", f"DJANGO_RL['DENY_CACHE_SIZE'] is {SHOWN}"),
            id="DENY_CACHE_SIZE",
        ),
        pytest.param(
            {"DENY_CACHE_MAX_AGE": HUGE},
            ("django_rl.E041", f"DJANGO_RL['DENY_CACHE_MAX_AGE'] is {SHOWN}"),
            id="DENY_CACHE_MAX_AGE",
        ),
        pytest.param(
            {HUGE: 1},
            ("django_rl.E001", f"settings.DJANGO_RL has unknown keys: {SHOWN}"),
            id="unknown key",
        ),
    ],
)
def test_absurd_numbers_are_check_errors_with_short_messages(settings, rl, expected):
    assert [(e.id, e.msg) for e in errors(settings, rl)] == [expected]


def test_manage_py_check_reports_a_rate_of_thousands_of_digits(settings):
    settings.ROOT_URLCONF = "tests.sites.urls_without_limits"
    settings.DJANGO_RL = policies(p={"algorithm": "fixed_window", "rate": "9" * 5000 + "/m"})
    with pytest.raises(SystemCheckError) as info:
        call_command("check")
    assert [line for line in str(info.value).splitlines() if "django_rl" in line] == [
        f"?: (django_rl.E007) DJANGO_RL['POLICIES']['p']: rate '{'9' * 27}...{'9' * 26}/m' "
        "must allow at most 1,000,000,000 hits"
    ]


NOT_CALLABLE = "a string"


def an_address(request):
    return "198.51.100.7"


async def an_async_address(request):
    return "198.51.100.7"


META_HINT = (
    "Set it to None (REMOTE_ADDR, and X-Forwarded-For with NUM_PROXIES), a request.META key "
    "such as 'HTTP_CF_CONNECTING_IP', or the dotted path of a function(request) -> str | None."
)
V4_HINT = (
    "It must be a whole number from 1 to 32: how many leading bits of an IPv4 address make "
    "one client's bucket (32, the default: each address; 24: each /24)."
)
V6_HINT = (
    "It must be a whole number from 1 to 128: how many leading bits of an IPv6 address make "
    "one client's bucket (64, the default: each /64; 128: each address)."
)


@pytest.mark.parametrize(
    ("rl", "expected"),
    [
        (
            {"IP_META_KEY": "CF-Connecting-IP"},
            Error(
                "DJANGO_RL['IP_META_KEY'] 'CF-Connecting-IP' is not a request.META key",
                hint="request.META keys are upper case: the header 'CF-Connecting-IP' is "
                "'HTTP_CF_CONNECTING_IP'.",
                id="django_rl.E080",
            ),
        ),
        (
            {"IP_META_KEY": "http_x_real_ip"},
            Error(
                "DJANGO_RL['IP_META_KEY'] 'http_x_real_ip' is not a request.META key",
                hint="request.META keys are upper case: 'HTTP_X_REAL_IP'.",
                id="django_rl.E080",
            ),
        ),
        (
            {"IP_META_KEY": "X Real IP"},
            Error(
                "DJANGO_RL['IP_META_KEY'] 'X Real IP' is not a request.META key",
                hint=META_HINT,
                id="django_rl.E080",
            ),
        ),
        (
            {"IP_META_KEY": ""},
            Error(
                "DJANGO_RL['IP_META_KEY'] '' is not a request.META key",
                hint=META_HINT,
                id="django_rl.E080",
            ),
        ),
        (
            {"IP_META_KEY": 5},
            Error("DJANGO_RL['IP_META_KEY'] is 5", hint=META_HINT, id="django_rl.E080"),
        ),
        (
            {"IP_META_KEY": "tests.nowhere.address"},
            Error(
                "DJANGO_RL['IP_META_KEY'] 'tests.nowhere.address' could not be imported: "
                "No module named 'tests.nowhere'",
                hint=META_HINT,
                id="django_rl.E080",
            ),
        ),
        (
            {"IP_META_KEY": "tests.checks.test_checks.NOT_CALLABLE"},
            Error(
                "DJANGO_RL['IP_META_KEY'] 'tests.checks.test_checks.NOT_CALLABLE' is not callable",
                hint=META_HINT,
                id="django_rl.E080",
            ),
        ),
        (
            {"IP_META_KEY": "tests.checks.test_checks.an_async_address"},
            Error(
                "DJANGO_RL['IP_META_KEY'] 'tests.checks.test_checks.an_async_address' is an async "
                "function",
                hint=META_HINT,
                id="django_rl.E080",
            ),
        ),
        *(
            (
                {"IPV4_PREFIX": value},
                Error(f"DJANGO_RL['IPV4_PREFIX'] is {value!r}", hint=V4_HINT, id="django_rl.E081"),
            )
            for value in (0, 33, -1, True, "24", 24.0, None)
        ),
        *(
            (
                {"IPV6_PREFIX": value},
                Error(f"DJANGO_RL['IPV6_PREFIX'] is {value!r}", hint=V6_HINT, id="django_rl.E082"),
            )
            for value in (0, 129, False, "64", 64.0)
        ),
    ],
)
def test_bad_address_settings(settings, rl, expected):
    assert errors(settings, rl) == [expected]


@pytest.mark.parametrize(
    "rl",
    [
        {"IP_META_KEY": None},
        {"IP_META_KEY": "HTTP_CF_CONNECTING_IP"},
        {"IP_META_KEY": "REMOTE_ADDR"},
        {"IP_META_KEY": "tests.checks.test_checks.an_address"},
        {"IP_META_KEY": an_address},
        {"IPV4_PREFIX": 1, "IPV6_PREFIX": 1},
        {"IPV4_PREFIX": 32, "IPV6_PREFIX": 128},
        {"IPV4_PREFIX": 24, "IPV6_PREFIX": 48, "NUM_PROXIES": 1},
    ],
)
def test_good_address_settings(settings, rl):
    assert errors(settings, {**rl, "POLICIES": {"p": {**GOOD, "key": "ip"}}}) == []


def test_bad_address_settings_used_anyway_raise_configuration_errors(settings):
    from django_rl import get_policy
    from django_rl.exceptions import ConfigurationError

    settings.DJANGO_RL = {"IPV6_PREFIX": 0, "POLICIES": {"p": GOOD}}
    with pytest.raises(ConfigurationError, match=r"DJANGO_RL\['IPV6_PREFIX'\] is 0 \(django_rl"):
        get_policy("p")
    # A function that does not import stops only the policies that read addresses.
    settings.DJANGO_RL = {
        "IP_META_KEY": "tests.nowhere.address",
        "POLICIES": {"by_ip": {**GOOD, "key": "ip"}, "by_user": {**GOOD, "key": "user"}},
    }
    with pytest.raises(ConfigurationError, match=r"could not be imported.*django_rl\.E080"):
        get_policy("by_ip")
    assert get_policy("by_user").name == "by_user"


def test_the_views_of_every_new_rate_form_and_key_pass_the_checks(settings):
    from tests.sites.urls_syntax import POLICIES

    assert errors(settings, {"POLICIES": POLICIES}, urls="tests.sites.urls_syntax") == []
