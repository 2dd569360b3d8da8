"""Blocks on the live counters page (time left, Unblock) and in ``manage.py ratelimit``."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from django.test import Client

from django_rl import get_policy

PAGE = "/admin/django_rl/livecounter/"
UNBLOCK = PAGE + "unblock/"
POLICIES = {
    "login": {"algorithm": "sliding_log", "rate": "2/m", "key": "ip", "block_for": "1h"},
    "plain": {"algorithm": "gcra", "burst": 5, "rate": "5/m", "key": "ip"},
    "slots": {"algorithm": "concurrency", "limit": 2, "timeout": 30, "key": "ip"},
}
ID = "ip:10.9.0.1"


@pytest.fixture(autouse=True)
def policies(settings):
    settings.DJANGO_RL = {"KEY_PREFIX": "t", "POLICIES": POLICIES}


def login_with(django_user_model, *codenames):
    user = django_user_model.objects.create_user("s", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def test_the_page_shows_a_blocked_identity_with_its_time_left(admin_client):
    get_policy("login").block(ID, 3_600)
    (row,) = admin_client.get(PAGE + "data/").json()["rows"]
    assert row["identity"] == ID and row["denied"]
    assert 3_590 < row["blocked"] <= 3_600
    html = admin_client.get(PAGE).content.decode()
    assert "Blocked" in html and 'name="unblock"' in html and f'value="login:{ID}"' in html


def test_unblock_ends_the_block(admin_client):
    get_policy("login").block(ID, 3_600)
    response = admin_client.post(UNBLOCK, {"unblock": [f"login:{ID}"]}, follow=True)
    assert [str(m) for m in response.context["messages"]] == [f"Unblocked {ID} under login."]
    assert get_policy("login").peek(ID).allowed


def test_unblock_needs_post_csrf_and_the_reset_permission(django_user_model, admin_user):
    get_policy("login").block(ID, 3_600)
    viewer = login_with(django_user_model, "view_livecounter")
    assert viewer.post(UNBLOCK, {"unblock": [f"login:{ID}"]}).status_code == 403
    admin = Client(enforce_csrf_checks=True)
    admin.force_login(admin_user)
    assert admin.get(UNBLOCK).status_code == 405
    assert admin.post(UNBLOCK, {"unblock": [f"login:{ID}"]}).status_code == 403  # no CSRF
    assert not get_policy("login").peek(ID).allowed


def run(*words):
    out = io.StringIO()
    call_command("ratelimit", *words, stdout=out)
    return out.getvalue().strip()


def test_the_command_blocks_unblocks_penalizes_and_rewards():
    assert run("block", "login", ID, "120").startswith(f"{ID} under login: denied for 1")
    assert not get_policy("login").peek(ID).allowed
    assert run("unblock", "login", ID) == f"{ID} under login: block ended."
    assert run("unblock", "login", ID) == f"{ID} under login: was not blocked."
    assert run("penalize", "plain", ID, "3") == f"{ID} under plain: allowed, 2 of 5 left."
    assert run("reward", "plain", ID) == f"{ID} under plain: allowed, 3 of 5 left."
    # An address is the identity requests from it count as.
    assert run("penalize", "plain", "10.9.0.1") == f"{ID} under plain: allowed, 2 of 5 left."


def test_the_command_refuses_what_the_methods_refuse():
    with pytest.raises(CommandError, match="concurrency"):
        run("penalize", "slots", ID)
    with pytest.raises(CommandError, match="at least 1"):
        run("reward", "plain", ID, "0")


def test_a_plain_policys_block_is_on_the_page_and_the_command_ends_it(admin_client):
    assert run("block", "plain", ID, "600").startswith(f"{ID} under plain: denied for")
    assert not get_policy("plain").hit(ID).allowed
    (row,) = admin_client.get(PAGE + "data/").json()["rows"]
    assert (row["policy"], row["identity"], row["denied"]) == ("plain", ID, True)
    assert 590 < row["blocked"] <= 600
    response = admin_client.post(UNBLOCK, {"unblock": [f"plain:{ID}"]}, follow=True)
    assert [str(m) for m in response.context["messages"]] == [f"Unblocked {ID} under plain."]
    assert get_policy("plain").hit(ID).allowed
    assert run("unblock", "plain", ID) == f"{ID} under plain: was not blocked."
