"""Overrides in the admin: the list (who set each, and when), the form, permissions.

Through Django's test client, the admin's own views, login and CSRF
machinery (``Client`` skips CSRF checks; the admin's own tests cover them).
"""

from __future__ import annotations

import datetime
from urllib.parse import quote

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import formats, timezone

from django_rl import get_policy
from django_rl.models import Override
from django_rl.overrides import LOADER
from django_rl.overrides.loader import marker_key
from tests.conftest import start_of_fresh_window

pytestmark = pytest.mark.django_db

LIST = "/admin/django_rl/override/"
ADD = LIST + "add/"
POLICIES = {
    "fw": {"algorithm": "fixed_window", "rate": "3/h", "key": "ip"},
    "api": {"algorithm": "token_bucket", "capacity": 3, "rate": "3/h", "key": "user_or_ip"},
}
#: What the add form needs besides what a test changes; the expiry a week ahead.
LATER = timezone.localtime() + datetime.timedelta(days=7)
FORM = {
    "policy": "fw",
    "identity": "203.0.113.9",
    "action": "block",
    "rate": "",
    "expires_at_0": LATER.strftime("%Y-%m-%d"),
    "expires_at_1": "12:00:00",
    "reason": "scraping /search",
}


@pytest.fixture(autouse=True)
def _policies(settings, redis_client):
    settings.DJANGO_RL = {"KEY_PREFIX": "t", "POLICIES": POLICIES}
    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=60_000)


@pytest.fixture
def staff(django_user_model):
    """Return a function that logs in a new staff user with some of the app's permissions."""

    def login(name: str, *codenames: str) -> Client:
        user = django_user_model.objects.create_user(name, password="pw", is_staff=True)
        user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
        client = Client()
        client.force_login(user)
        return client

    return login


ALL = ("view_override", "add_override", "change_override", "delete_override")


def make(policy="fw", identity="ip:10.0.0.1", action="block", rate="", **fields):
    fields.setdefault("expires_at", timezone.now() + datetime.timedelta(days=1))
    fields.setdefault("reason", "tests")
    return Override.objects.create(
        policy=policy, identity=identity, action=action, rate=rate, **fields
    )


def form_errors(response):
    """Return the add/change form's errors, field by field."""
    form = response.context["adminform"].form
    return {name: list(errors) for name, errors in form.errors.items()}


# The list


def cell(field, value):
    return f'<td class="field-{field}">{value}</td>'


def test_the_list_shows_each_override_with_who_set_it_and_when(staff):
    now = timezone.now()
    make(
        identity="ip:10.0.0.0/8",
        action="rate",
        rate="10/h",
        reason="partner network",
        created_by="alice",
        updated_by="bob",
        expires_at=now + datetime.timedelta(days=3, minutes=90),
    )
    make(identity="user:42", action="exempt", created_by="carol", expires_at=now)
    html = staff("viewer", "view_override").get(LIST).content.decode()
    for expected in [
        cell("identity", "ip:10.0.0.0/8"),
        cell("override", "rate 10/h"),
        cell("in_force", "3\xa0days, 1\xa0hour left"),
        cell("reason", "partner network"),
        cell("created_by", "alice"),
        cell("updated_by", "bob"),
        cell("identity", "user:42"),
        cell("override", "exempt"),
        cell("in_force", "expired"),
        cell("created_by", "carol"),
    ]:
        assert expected in html
    made = timezone.localtime(Override.objects.get(identity="user:42").created_at)
    # As the admin writes it (Django's format: "1 a.m." on the hour, "midnight", ...).
    when = formats.localize(made)
    assert f'<td class="field-created_at nowrap">{when}</td>' in html


def test_the_list_filters_by_policy_and_by_whether_in_force(staff):
    make(policy="fw", identity="ip:10.0.0.1")
    make(policy="api", identity="user:1")
    make(policy="api", identity="user:2", expires_at=timezone.now())
    client = staff("viewer", "view_override")

    def listed(query):
        response = client.get(f"{LIST}?{query}")
        return sorted(str(o) for o in response.context["cl"].result_list)

    assert listed("policy=api") == ["api / user:1: block", "api / user:2: block"]
    assert listed("policy=fw") == ["fw / ip:10.0.0.1: block"]
    assert listed("in_force=no") == ["api / user:2: block"]
    assert listed("in_force=yes&policy=api") == ["api / user:1: block"]


# Adding, changing, deleting


def test_staff_with_the_permission_add_an_override_and_every_process_hears_of_it(
    staff, redis_client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = staff("alice", *ALL).post(ADD, FORM)
    assert (response.status_code, response["Location"]) == (302, LIST)
    made = Override.objects.get()
    assert (made.policy, made.identity, made.action, made.rate, made.reason) == (
        "fw",
        "ip:203.0.113.9",
        "block",
        "",
        "scraping /search",
    )
    assert (made.created_by, made.updated_by) == ("alice", "alice")
    assert timezone.localtime(made.expires_at).strftime("%Y-%m-%d %H:%M:%S") == (
        f"{FORM['expires_at_0']} 12:00:00"
    )
    assert redis_client.get(marker_key("t")) is not None
    assert LOADER.load()
    assert get_policy("fw").hit("ip:203.0.113.9").allowed is False


def test_changing_an_override_records_who_changed_it(staff):
    made = make(created_by="alice", updated_by="alice")
    data = {**FORM, "identity": made.identity, "action": "rate", "rate": "10/h"}
    response = staff("bob", *ALL).post(f"{LIST}{made.pk}/change/", data)
    assert response.status_code == 302
    made.refresh_from_db()
    assert (made.action, made.rate, made.created_by, made.updated_by) == (
        "rate",
        "10/h",
        "alice",
        "bob",
    )


def test_deleting_an_override_ends_it_everywhere(
    staff, redis_client, django_capture_on_commit_callbacks
):
    made = make()
    assert LOADER.load()
    with django_capture_on_commit_callbacks(execute=True):
        response = staff("alice", *ALL).post(f"{LIST}{made.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert Override.objects.count() == 0
    assert redis_client.get(marker_key("t")) is not None
    assert LOADER.load()
    assert get_policy("fw").hit("ip:10.0.0.1").allowed is True


def test_the_add_form_takes_policy_and_identity_from_the_live_counters_link(staff, redis_client):
    get_policy("fw").hit("ip:198.51.100.7")
    client = staff("alice", "view_livecounter", "add_override")
    tbody = client.get("/admin/django_rl/livecounter/data/").json()["tbody"]
    link = f"{ADD}?policy=fw&amp;identity={quote('ip:198.51.100.7', safe='')}"
    assert f'<a class="rl-override" href="{link}"' in tbody
    form = client.get(link.replace("&amp;", "&")).context["adminform"].form
    assert (form.initial["policy"], form.initial["identity"]) == ("fw", "ip:198.51.100.7")
    # Without the permission to add one, no link.
    viewer = staff("viewer", "view_livecounter")
    assert "rl-override" not in viewer.get("/admin/django_rl/livecounter/data/").json()["tbody"]


def test_the_live_counters_show_an_overrides_rate_as_live(admin_client):
    make(identity="ip:10.0.0.1", action="rate", rate="10/h")
    assert LOADER.load()
    get_policy("fw").hit("ip:10.0.0.1")
    rows = admin_client.get("/admin/django_rl/livecounter/data/").json()["rows"]
    assert [(r["identity"], r["status"], r["rate"], r["limit"], r["remaining"]) for r in rows] == [
        ("ip:10.0.0.1", "live", "10/h", 10, 9)
    ]


# The form


UNIT = (
    "rate '10/fortnight' has an unknown period unit 'fortnight'; use s, sec, second, m, min, "
    "minute, h, hour, d, day, w, week (plurals too), or no unit for seconds ('100/10')"
)


@pytest.mark.parametrize(
    ("changes", "errors"),
    [
        (
            {"policy": "nope"},
            {"policy": ["Select a valid choice. nope is not one of the available choices."]},
        ),
        (
            {"identity": "ip:300.1.1.1"},
            {"identity": ["'ip:300.1.1.1': ip: must be followed by an IPv4 or IPv6 address"]},
        ),
        ({"action": "rate"}, {"rate": ["A rate override needs a rate, such as 1000/h."]}),
        ({"action": "rate", "rate": "10/fortnight"}, {"rate": [UNIT]}),
        ({"expires_at_0": "2001-01-01"}, {"expires_at": ["The expiry must be in the future."]}),
        ({"reason": ""}, {"reason": ["This field is required."]}),
    ],
)
def test_the_form_refuses_what_cannot_apply(staff, changes, errors):
    response = staff("alice", *ALL).post(ADD, {**FORM, **changes})
    assert (response.status_code, form_errors(response)) == (200, errors)
    assert Override.objects.count() == 0


def test_one_override_per_policy_and_target(staff):
    make(identity="ip:203.0.113.9")
    response = staff("alice", *ALL).post(ADD, FORM)  # the same target, typed bare
    assert form_errors(response) == {
        "__all__": ["Override with this Policy and Identity or network already exists."]
    }


def test_a_rate_is_kept_only_for_a_rate_override(staff):
    staff("alice", *ALL).post(ADD, {**FORM, "action": "exempt", "rate": "10/h"})
    assert Override.objects.get().rate == ""


# Permissions


def test_anonymous_users_go_to_the_admin_login(client):
    response = client.get(LIST)
    assert (response.status_code, response["Location"]) == (302, f"/admin/login/?next={LIST}")


def test_each_change_needs_its_permission(staff):
    made = make()
    change, delete = f"{LIST}{made.pk}/change/", f"{LIST}{made.pk}/delete/"
    assert staff("nobody").get(LIST).status_code == 403
    viewer = staff("viewer", "view_override")
    assert [viewer.get(url).status_code for url in (LIST, change, ADD, delete)] == [
        200,
        200,
        403,
        403,
    ]
    # The change page is read-only: posting to it changes nothing.
    assert viewer.post(change, {**FORM, "reason": "mine"}).status_code == 403
    adder = staff("adder", "add_override")
    assert adder.post(ADD, {**FORM, "identity": "user:9"}).status_code == 302
    assert adder.post(delete, {"post": "yes"}).status_code == 403
    assert sorted(Override.objects.values_list("identity", "reason")) == [
        ("ip:10.0.0.1", "tests"),
        ("user:9", "scraping /search"),
    ]
