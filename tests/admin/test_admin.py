"""The admin's live counters: the page, its JSON endpoint, reset, permissions."""

from __future__ import annotations

import io
import os
import re

import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.test import Client, override_settings
from django.utils.html import escape
from hypothesis import given
from hypothesis import strategies as st

from django_rl import get_policy
from django_rl.admin import views as admin_views
from django_rl.core.keys import safe_identity
from tests.conftest import start_of_fresh_window
from tests.support.properties import WITH_REDIS
from tests.support.redis_server import caches_for, free_port

PAGE = "/admin/django_rl/livecounter/"
DATA = PAGE + "data/"
RESET = PAGE + "reset/"
POLICIES = {
    "fw": {"algorithm": "fixed_window", "rate": "10/h", "key": "ip"},
    "sl": {"algorithm": "sliding_log", "rate": "10/h", "key": "ip"},
    "tb": {"algorithm": "token_bucket", "capacity": 10, "rate": "10/h", "key": "ip"},
}
ROW_FIELDS = {
    "policy",
    "identity",
    "status",
    "algorithm",
    "rate",
    "limit",
    "used",
    "remaining",
    "denied",
    "shadow",
    "retry_after",
    "reset_after",
    "detail",
    "blocked",
    "keys",
}


@pytest.fixture(autouse=True)
def policies(settings, redis_client):
    settings.DJANGO_RL = {"KEY_PREFIX": "t", "POLICIES": POLICIES}
    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=60_000)
    return {name: get_policy(name) for name in POLICIES}


@pytest.fixture
def staff(django_user_model):
    """Return a function that logs in a new staff user with some of the app's permissions."""
    made = []

    def login(*codenames: str) -> Client:
        user = django_user_model.objects.create_user(
            f"staff{len(made)}", password="pw", is_staff=True
        )
        user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
        made.append(user)
        client = Client()
        client.force_login(user)
        return client

    return login


def hit(name, identity, times=1):
    for _ in range(times):
        get_policy(name).hit(identity)


# The admin index


def test_the_index_links_live_counters_under_rate_limiting(admin_client):
    html = admin_client.get("/admin/").content.decode()
    # The app's module on the index (the same markup from Django 4.2 to 6.x).
    section = html[html.index('<div class="app-django_rl module') :]
    section = section[: section.index("</table>")]
    assert re.search(r"<caption>\s*<a [^>]*>Rate limiting</a>\s*</caption>", section)
    assert f'<a href="{PAGE}">Live counters</a>' in section


def test_the_migrations_make_the_permissions(db):
    permissions = Permission.objects.filter(content_type__app_label="django_rl")
    assert sorted((p.codename, p.name) for p in permissions) == [
        ("add_override", "Can add override"),
        ("change_override", "Can change override"),
        ("delete_override", "Can delete override"),
        ("reset_livecounter", "Can reset live counters"),
        ("view_livecounter", "Can view live counter"),
        ("view_override", "Can view override"),
    ]


def test_no_migration_is_missing(db):
    out = io.StringIO()
    call_command("makemigrations", "django_rl", "--check", "--dry-run", stdout=out)
    assert out.getvalue() == "No changes detected in app 'django_rl'\n"


# Permissions


@pytest.mark.parametrize("url", [PAGE, DATA])
def test_anonymous_users_go_to_the_admin_login(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"] == f"/admin/login/?next={url}"


def test_staff_without_the_view_permission_get_403(staff):
    client = staff()
    assert client.get(PAGE).status_code == 403
    response = client.get(DATA)
    assert (response.status_code, response.json()) == (
        403,
        {"error": "You may not view the live counters."},
    )
    assert client.get("/admin/").content.decode().count("Live counters") == 0


def test_users_who_are_not_staff_go_to_the_login_even_with_the_permission(
    django_user_model, client
):
    user = django_user_model.objects.create_user("someone", password="pw")
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="django_rl"))
    client.force_login(user)
    assert client.get(PAGE).status_code == 302


def test_viewers_see_counters_but_no_reset_controls(staff):
    hit("sl", "ip:10.0.0.1")
    client = staff("view_livecounter")
    html = client.get(PAGE).content.decode()
    assert "ip:10.0.0.1" in html
    assert 'name="rows"' not in html and "Reset selected" not in html
    assert "Reset one identity" not in html
    assert client.get(DATA).json()["rows"][0]["identity"] == "ip:10.0.0.1"
    response = client.post(RESET, {"rows": ["sl:ip:10.0.0.1"], "confirmed": "yes"})
    assert response.status_code == 403
    assert get_policy("sl").peek("ip:10.0.0.1").remaining == 9


def test_the_reset_permission_alone_resets(staff):
    hit("sl", "ip:10.0.0.1")
    client = staff("reset_livecounter")
    assert client.get(PAGE).status_code == 403
    response = client.post(RESET, {"rows": ["sl:ip:10.0.0.1"], "confirmed": "yes"})
    assert response.status_code == 302
    assert get_policy("sl").peek("ip:10.0.0.1").remaining == 10


def test_viewers_with_the_reset_permission_see_the_controls(staff):
    hit("sl", "ip:10.0.0.1")
    html = staff("view_livecounter", "reset_livecounter").get(PAGE).content.decode()
    assert 'value="sl:ip:10.0.0.1"' in html and "Reset selected" in html


# The JSON endpoint


def test_json_shape(admin_client):
    hit("fw", "ip:10.0.0.1", 3)
    hit("tb", "ip:10.0.0.2", 10)
    data = admin_client.get(DATA).json()
    assert set(data) == {
        "rows",
        "cursor",
        "next_cursor",
        "examined",
        "keys_in_redis",
        "skipped",
        "unavailable",
        "updated",
        "tbody",
        "summary",
        "fallback",
    }
    assert data["fallback"] == ""  # this process has not decided locally
    assert (
        data["cursor"],
        data["next_cursor"],
        data["keys_in_redis"],
        data["skipped"],
        data["unavailable"],
    ) == ("0:0", None, 2, 0, [])
    bucket, window = data["rows"]
    assert set(bucket) == set(window) == ROW_FIELDS
    assert {
        k: bucket[k] for k in ("policy", "identity", "status", "algorithm", "rate", "limit")
    } == {
        "policy": "tb",
        "identity": "ip:10.0.0.2",
        "status": "live",
        "algorithm": "token_bucket",
        "rate": "10/h",
        "limit": 10,
    }
    assert (bucket["remaining"], bucket["denied"], bucket["detail"]) == (0, True, "0 tokens left")
    assert 350 < bucket["retry_after"] <= 360
    assert {k: window[k] for k in ("policy", "used", "remaining", "denied", "retry_after")} == {
        "policy": "fw",
        "used": 3,
        "remaining": 7,
        "denied": False,
        "retry_after": 0.0,
    }
    assert window["keys"] == [
        k.decode() for k in get_policy("fw").backend.client.keys("t:fw:{ip:10.0.0.1}:*")
    ]
    assert 'data-selector="tb:ip:10.0.0.2"' in data["tbody"]
    assert "2 counters: all 2 keys in Redis walked." in data["summary"]


def test_a_shadow_policys_would_be_denial_is_shown_as_such(settings, admin_client):
    settings.DJANGO_RL = {
        "KEY_PREFIX": "t",
        "POLICIES": {**POLICIES, "sh": {**POLICIES["fw"], "rate": "2/h", "mode": "shadow"}},
    }
    shadowed, enforced = get_policy("sh"), get_policy("fw")
    for _ in range(3):
        shadowed.hit("ip:10.0.0.5")
    for _ in range(11):
        enforced.hit("ip:10.0.0.6")
    data = admin_client.get(DATA).json()
    rows = {row["policy"]: row for row in data["rows"]}
    assert (rows["sh"]["denied"], rows["sh"]["shadow"]) == (True, True)
    assert (rows["fw"]["denied"], rows["fw"]["shadow"]) == (True, False)
    assert data["tbody"].count("Would deny (shadow)") == 1
    assert data["tbody"].count(">Denied<") == 1


def test_json_pages_through_every_counter_once(admin_client):
    client = get_policy("sl").backend.client
    for i in range(130):
        hit("sl", f"ip:10.1.{i // 100}.{i % 100}")
    client.mset({f"other:{i}": 1 for i in range(300)})
    seen, cursor, pages = [], "0:0", 0
    while cursor is not None:
        data = admin_client.get(DATA, {"cursor": cursor, "size": 20}).json()
        assert data["cursor"] == cursor
        seen += [row["identity"] for row in data["rows"]]
        cursor, pages = data["next_cursor"], pages + 1
    assert sorted(seen) == sorted(f"ip:10.1.{i // 100}.{i % 100}" for i in range(130))
    assert pages >= 130 // 20 // 2  # pages hold about the page size, never all at once


def test_json_filter_and_search(admin_client):
    hit("fw", "ip:10.2.0.1")
    hit("sl", "ip:10.2.0.1")
    hit("sl", "ip:10.3.0.1")
    hit("sl", "x-api-key:a b")

    def listed(**params):
        response = admin_client.get(DATA, params)
        assert response.status_code == 200, response.content
        return sorted((r["policy"], r["identity"]) for r in response.json()["rows"])

    digest = safe_identity("x-api-key:a b")
    assert listed(policy="fw") == [("fw", "ip:10.2.0.1")]
    assert listed(q="ip:10.2") == [("fw", "ip:10.2.0.1"), ("sl", "ip:10.2.0.1")]
    assert listed(q="ip:10.2", match="exact") == []
    assert listed(q="ip:10.3.0.1", match="exact") == [("sl", "ip:10.3.0.1")]
    assert listed(q="x-api-key:a b", match="exact") == [("sl", digest)]
    assert listed(q=digest, match="exact") == [("sl", digest)]
    assert listed(q="x-api-key:", policy="sl") == [("sl", digest)]


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({"cursor": "zero"}, "'zero' is not a listing cursor"),
        ({"size": "0"}, "Ensure this value is greater than or equal to 1."),
        ({"policy": "a*"}, "'a*' is not a policy name"),
        ({"q": "ip:*"}, "identities in keys have only letters, digits and .:_@-~"),
        (
            {"q": "x", "match": "exact", "policy": "nope"},
            "No rate-limit policy named 'nope'. Known policies: 'fw', 'sl', 'tb'.",
        ),
    ],
)
def test_json_refuses_bad_queries_with_the_reason(admin_client, params, error):
    response = admin_client.get(DATA, params)
    assert response.status_code == 400
    assert response.json()["error"].startswith(error)


def test_redis_down_answers_503_and_the_page_says_why(admin_client):
    with override_settings(CACHES=caches_for(f"redis://127.0.0.1:{free_port()}/0")):
        response = admin_client.get(DATA)
        page = admin_client.get(PAGE)
    assert response.status_code == 503
    assert response.json()["error"].startswith("Redis could not be read: could not read the")
    assert page.status_code == 200
    assert "Redis could not be read" in page.content.decode()


def test_invalid_settings_answer_500_with_the_check_to_run(admin_client, settings):
    settings.DJANGO_RL = {"POLICY": {}}
    response = admin_client.get(DATA)
    assert response.status_code == 500
    assert "unknown keys: 'POLICY'" in response.json()["error"]
    assert "run manage.py check" in response.json()["error"]
    assert admin_client.get(PAGE).status_code == 200


# Reset


def test_reset_asks_for_confirmation_first(admin_client):
    hit("sl", "ip:10.4.0.1", 3)
    response = admin_client.post(RESET, {"rows": ["sl:ip:10.4.0.1"], "back": "policy=sl"})
    html = response.content.decode()
    assert response.status_code == 200
    assert "<li><code>ip:10.4.0.1</code> under <strong>sl</strong></li>" in html
    assert 'name="confirmed" value="yes"' in html
    assert f'href="{PAGE}?policy=sl"' in html
    assert get_policy("sl").peek("ip:10.4.0.1").remaining == 7


def test_confirmed_reset_deletes_and_says_how_many_keys(admin_client):
    hit("sl", "ip:10.4.0.1", 3)
    hit("fw", "ip:10.4.0.1", 3)
    hit("fw", "ip:10.4.0.2", 3)
    response = admin_client.post(
        RESET,
        {
            "rows": ["sl:ip:10.4.0.1", "fw:ip:10.4.0.1"],
            "confirmed": "yes",
            "back": "policy=fw&cursor=0:0&evil=https://example.com",
        },
        follow=True,
    )
    assert response.redirect_chain == [(f"{PAGE}?policy=fw&cursor=0%3A0", 302)]
    assert [str(m) for m in response.context["messages"]] == ["Reset 2 counters: 2 keys deleted."]
    assert [(r.policy, r.identity) for r in response.context["rows"]] == [("fw", "ip:10.4.0.2")]


def test_reset_one_identity_under_every_policy(admin_client):
    for name in POLICIES:
        hit(name, "x-api-key:a b")
    hit("sl", "ip:10.4.0.9")
    confirm = admin_client.post(RESET, {"identity": "x-api-key:a b"}).content.decode()
    assert "<li><code>x-api-key:a b</code> under every policy: fw, sl, tb</li>" in confirm
    response = admin_client.post(
        RESET, {"identity": "x-api-key:a b", "confirmed": "yes"}, follow=True
    )
    assert [str(m) for m in response.context["messages"]] == [
        "Reset x-api-key:a b under 3 policies: 3 keys deleted."
    ]
    assert [r.identity for r in response.context["rows"]] == ["ip:10.4.0.9"]


def test_a_digest_from_the_page_resets_its_identity(admin_client):
    hit("tb", "x-api-key:a b")
    digest = safe_identity("x-api-key:a b")
    admin_client.post(RESET, {"rows": [f"tb:{digest}"], "confirmed": "yes"})
    assert get_policy("tb").peek("x-api-key:a b").remaining == 10


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "Select counters to reset, or name an identity."),
        ({"rows": ["sl:ip:{1}"]}, "'sl:ip:{1}' does not name a counter"),
        ({"rows": ["*:ip:1"]}, "'*:ip:1' does not name a counter"),
    ],
)
def test_bad_reset_requests_reset_nothing_and_say_why(admin_client, data, message):
    hit("sl", "ip:10.4.0.1")
    response = admin_client.post(RESET, data, follow=True)
    assert [str(m) for m in response.context["messages"]] == [message]
    assert get_policy("sl").peek("ip:10.4.0.1").remaining == 9


def test_reset_of_a_policy_no_longer_configured_says_so(admin_client):
    response = admin_client.post(RESET, {"rows": ["gone:ip:1"], "confirmed": "yes"}, follow=True)
    (message,) = [str(m) for m in response.context["messages"]]
    assert message.startswith("Nothing more was reset: No rate-limit policy named 'gone'")


def test_reset_needs_post_and_a_csrf_token(admin_user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    hit("sl", "ip:10.4.0.1")
    assert client.get(RESET).status_code == 405
    response = client.post(RESET, {"rows": ["sl:ip:10.4.0.1"], "confirmed": "yes"})
    assert response.status_code == 403
    assert get_policy("sl").peek("ip:10.4.0.1").remaining == 9


def test_the_page_polls_at_the_interval_it_states(admin_client):
    html = admin_client.get(PAGE, {"policy": "sl"}).content.decode()
    assert f'data-url="{DATA}?policy=sl"' in html
    assert f'data-interval="{admin_views.POLL_INTERVAL_MS}"' in html
    assert '<script src="/static/django_rl/live_counters.js" defer></script>' in html


ABOVE_SCAN = "is not a listing cursor: its SCAN position is above 18446744073709551615"
START_AGAIN = "(numbered from 0): start again from the first page"


@pytest.mark.parametrize(
    ("cursor", "error"),
    [
        # SCAN cursors are unsigned 64-bit: Redis answers "ERR invalid cursor" past that.
        ("0:18446744073709551616", f"'0:18446744073709551616' {ABOVE_SCAN}"),
        ("0:99999999999999999999", f"'0:99999999999999999999' {ABOVE_SCAN}"),
        # One server here: there is no server 1.
        ("1:0", f"the listing cursor '1:0' names server 1, but the keys are on 1 {START_AGAIN}"),
        (
            "9999:5",
            f"the listing cursor '9999:5' names server 9999, but the keys are on 1 {START_AGAIN}",
        ),
    ],
)
def test_json_refuses_an_out_of_range_cursor_as_a_bad_request(admin_client, cursor, error):
    response = admin_client.get(DATA, {"cursor": cursor})
    assert (response.status_code, response.json()) == (400, {"error": error})
    page = admin_client.get(PAGE, {"cursor": cursor})  # the page shows the same reason
    assert page.status_code == 200
    assert escape(error) in page.content.decode()


def test_the_largest_scan_cursor_is_a_cursor(admin_client):
    response = admin_client.get(DATA, {"cursor": f"0:{2**64 - 1}"})
    assert response.status_code == 200
    assert response.json()["cursor"] == f"0:{2**64 - 1}"


#: What a browser or a script may send as each query parameter: arbitrary
#: text, or a near miss of its form.
QUERY_VALUES = {
    "policy": st.text(max_size=70) | st.sampled_from(["fw", "nope", "a*"]),
    "q": st.text(max_size=40) | st.sampled_from(["ip:", "ip:10.9.0.1", "ip:*"]),
    "match": st.text(max_size=8) | st.sampled_from(["exact", "prefix"]),
    "cursor": st.text(max_size=30)
    | st.builds(
        "{}:{}".format,
        st.integers(0, 3),
        st.integers(0, 2**64 - 1) | st.integers(2**64, 10**20 - 1),
    ),
    "size": st.text(max_size=8) | st.integers(-(10**30), 10**30).map(str),
}
#: One parameter (the others left out, so it alone decides), or several.
queries = st.sampled_from(sorted(QUERY_VALUES)).flatmap(
    lambda name: QUERY_VALUES[name].map(lambda value: {name: value})
) | st.fixed_dictionaries({}, optional=QUERY_VALUES)


def test_json_answers_any_query_with_the_page_or_a_bad_request(admin_client):
    hit("fw", "ip:10.9.0.1")

    @WITH_REDIS
    @given(params=queries)
    def ask(params):
        response = admin_client.get(DATA, params)
        assert response.status_code in {200, 400}, (params, response.content)
        if response.status_code == 400:
            assert response.json()["error"]

    ask()


# Local decisions (the outage fallback)


def _local(timestamp: float, fmt: str) -> str:
    from datetime import datetime, timezone

    from django.utils.timezone import localtime

    return localtime(datetime.fromtimestamp(timestamp, tz=timezone.utc)).strftime(fmt)


def test_the_page_says_when_and_since_when_this_process_decides_locally(admin_client, settings):
    from django_rl.policies.fallback import get_fallback_store

    settings.DJANGO_RL = {
        "KEY_PREFIX": "t",
        "POLICIES": {**POLICIES, "fb": {**POLICIES["fw"], "fallback_rate": "3/h"}},
    }
    with override_settings(CACHES=caches_for(f"redis://127.0.0.1:{free_port()}/0")):
        decisions = [get_policy("fb").hit("ip:10.9.9.9") for _ in range(2)]
        during = get_fallback_store().status().current
        response = admin_client.get(DATA)
        page = admin_client.get(PAGE).content.decode()
    assert [(d.allowed, d.fallback) for d in decisions] == [(True, True)] * 2
    assert during is not None
    since = _local(during.since, "%Y-%m-%d %H:%M:%S")
    last = _local(during.last, "%H:%M:%S")
    said = (
        f"This process (pid {os.getpid()}) has been deciding locally since {since}: Redis could "
        "not answer policies fb, which count at their fallback_rate in each process (2 local "
        f"decisions, the last at {last}; identities held: 1, at most 10,000 per policy)."
    )
    # Said while Redis cannot be read, on the page and with the JSON's error.
    assert response.status_code == 503
    assert re.sub(r"<[^>]+>", "", response.json()["fallback"]) == said
    assert said in re.sub(r"<[^>]+>", "", page)
    # Redis answers again: the next decision is Redis's, and the page says when it was local.
    assert not get_policy("fb").hit("ip:10.9.9.9").degraded
    previous = get_fallback_store().status().previous
    assert previous is not None
    until = _local(previous.until, "%Y-%m-%d %H:%M:%S")
    assert re.sub(r"<[^>]+>", "", admin_client.get(DATA).json()["fallback"]) == (
        f"This process (pid {os.getpid()}) last decided locally from {since} to {until}, when "
        "Redis answered again (2 local decisions, policies fb)."
    )
