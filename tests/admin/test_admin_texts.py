"""What the admin and the command say: help texts shown as written, counts that agree in number."""

from __future__ import annotations

import pytest
from django.test import Client

from django_rl import get_policy
from django_rl.inspection import Query, list_counters
from tests.conftest import start_of_fresh_window

pytestmark = pytest.mark.django_db

POLICIES = {
    "sl": {"algorithm": "sliding_log", "rate": "10/h", "key": "ip"},
    "tb": {"algorithm": "token_bucket", "capacity": 2, "rate": "1/h", "key": "ip"},
}


@pytest.fixture(autouse=True)
def _policies(settings, redis_client):
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=60_000)


def test_the_override_forms_help_texts_show_as_written(django_user_model):
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", password="pw"))
    page = client.get("/admin/django_rl/override/add/").content.decode()
    assert "ip:&lt;address&gt;" in page and "&lt;address&gt;:&lt;port&gt;" in page
    assert "ip:<address>" not in page


def test_the_live_counters_details_agree_in_number():
    get_policy("sl").hit("ip:10.0.0.1")
    get_policy("tb").hit("ip:10.0.0.1")
    rows = {row.policy: row for row in list_counters(Query()).rows}
    assert rows["sl"].detail == "1 entry in the log"
    assert rows["tb"].detail == "1 token left"
    get_policy("sl").hit("ip:10.0.0.1", cost=2)
    detail = {row.policy: row for row in list_counters(Query()).rows}["sl"].detail
    assert detail == "2 entries in the log, 3 units of cost"


def test_the_admin_pages_show_times_in_the_servers_time_zone_and_name_it(
    django_user_model, settings
):
    settings.TIME_ZONE = "Asia/Kathmandu"
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", password="pw"))
    page = client.get("/admin/django_rl/livecounter/").content.decode()
    # The script formats its times in the zone the page names (data-time-zone).
    assert 'data-time-zone="Asia/Kathmandu"' in page
    assert '<span class="rl-zone">(Asia/Kathmandu)</span>' in page
    assert "times in Asia/Kathmandu" in page
    listed = client.get("/admin/django_rl/override/").content.decode()
    assert "<h2>Times in Asia/Kathmandu (the server&#x27;s time zone)</h2>" in listed
    form = client.get("/admin/django_rl/override/add/").content.decode()
    assert "a time in Asia/Kathmandu, the server&#x27;s time zone" in form
