"""The live counters page in a real headless Chromium (Debian's, driven by Playwright).

``make test`` installs the ``chromium`` package when it is missing, so these
tests run everywhere the suite runs; they are never skipped. Set
``DJANGO_RL_SCREENSHOT=docs/admin-live-counters.png`` to also write the
page's screenshot where the docs show it, and the charts' beside it as
``docs/admin-charts.png`` (``make screenshot``).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import override_settings
from playwright.sync_api import Browser, Page, sync_playwright

from django_rl import get_policy
from django_rl.admin import views as admin_views
from django_rl.core.keys import safe_identity
from django_rl.observability import history
from tests.conftest import start_of_fresh_window
from tests.support.redis_server import caches_for, free_port

CHROMIUM = "/usr/bin/chromium"
# A fresh profile comes from launch() itself (a temporary user-data dir,
# removed on close). The rest keeps Chromium off the network: without them it
# keeps trying to reach Google's services, which a closed network answers with
# nothing but delays.
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
]
PAGE = "/admin/django_rl/livecounter/"
POLL_MS = 300
IDENTITY = "ip:203.0.113.77"
KEY_WITH_SPACES = "x-api-key:Bearer 9f86d081"  # digested in keys
KINDS = ("allowed", "denied", "shadow_denied")
#: The charts' screenshot, written beside the page's (``make screenshot``).
CHARTS_SHOT = "admin-charts.png"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium for the module, closed (and its processes gone) at the end."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium package")
    with pytest.MonkeyPatch.context() as patch:
        # Playwright's sync API keeps an event loop running in this thread,
        # which Django takes for an async context; the tests' own database
        # calls are plain synchronous code on the main thread.
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        playwright = sync_playwright().start()
        try:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                yield browser
            finally:
                browser.close()
        finally:
            playwright.stop()


@pytest.fixture
def fresh_minute(redis_client) -> None:
    """Start the test with 20 s or more left in the minute of the Redis clock.

    Fixed-window keys (``per_minute``, ``api``, ``writes``) die at the end of
    their minute: a test that hits one near the end would see its row vanish
    before the page shows it.
    """
    start_of_fresh_window(redis_client, 60_000, min_left_ms=20_000)


@pytest.fixture(autouse=True)
def _poll_fast(monkeypatch):
    monkeypatch.setattr(admin_views, "POLL_INTERVAL_MS", POLL_MS)


def new_page(browser: Browser, live_server, **options) -> Page:
    context = browser.new_context(base_url=live_server.url, **options)
    context.set_default_timeout(10_000)
    return context.new_page()


@pytest.fixture
def page(browser, live_server) -> Iterator[Page]:
    """A page in a browser context of its own: no cookies from other tests."""
    page = new_page(browser, live_server)
    try:
        yield page
    finally:
        page.context.close()


def log_in(page: Page, username: str, password: str) -> None:
    page.goto("/admin/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")


def row(page: Page, policy: str, identity: str) -> str:
    return f'tr[data-selector="{policy}:{identity}"]'


def test_a_superuser_watches_a_new_client_appear_live_and_resets_it(page, admin_user):
    log_in(page, "admin", "password")
    page.get_by_role("link", name="Live counters", exact=True).click()
    page.wait_for_url(f"**{PAGE}")
    assert page.inner_text("#content h1") == "Live counters"
    page.evaluate("window.notReloaded = true")
    navigations = []
    page.on("framenavigated", lambda frame: navigations.append(frame.url))

    for _ in range(3):
        get_policy("login").hit(IDENTITY)
    page.wait_for_selector(row(page, "login", IDENTITY))
    assert page.inner_text(f"{row(page, 'login', IDENTITY)} .rl-used").strip() == "3 / 5"

    for _ in range(2):
        get_policy("login").hit(IDENTITY)
    page.wait_for_selector(f"{row(page, 'login', IDENTITY)}.rl-denied")
    cells = page.text_content(row(page, "login", IDENTITY))
    assert "5 / 5" in cells and "Denied" in cells and "5 entries in the log" in cells
    assert page.evaluate("window.notReloaded") is True
    assert navigations == []
    assert page.inner_text("[data-rl=updated]") != ""

    page.check(f'{row(page, "login", IDENTITY)} input[name="rows"]')
    page.click('input[value="Reset selected"]')
    page.wait_for_url("**/reset/")
    assert f"{IDENTITY} under login" in page.inner_text("#content")
    page.click('input[value="Yes, reset"]')
    page.wait_for_url(f"**{PAGE}?*")
    assert page.inner_text("ul.messagelist") == "Reset 1 counter: 1 key deleted."
    assert page.query_selector(row(page, "login", IDENTITY)) is None
    assert get_policy("login").peek(IDENTITY).remaining == 5


def test_pause_holds_the_page_still_until_resumed(page, admin_user, fresh_minute):
    log_in(page, "admin", "password")
    page.goto(PAGE)
    page.click("[data-rl=pause]")
    assert page.inner_text("[data-rl=pause]") == "Resume"
    get_policy("per_minute").hit(IDENTITY)
    page.wait_for_timeout(POLL_MS * 5)
    assert page.query_selector(row(page, "per_minute", IDENTITY)) is None
    page.click("[data-rl=pause]")
    page.wait_for_selector(row(page, "per_minute", IDENTITY))
    assert page.inner_text("[data-rl=pause]") == "Pause"


def test_the_page_says_when_redis_is_down_and_recovers_by_itself(page, admin_user):
    log_in(page, "admin", "password")
    get_policy("login").hit(IDENTITY)
    page.goto(PAGE)
    page.wait_for_selector(row(page, "login", IDENTITY))
    with override_settings(CACHES=caches_for(f"redis://127.0.0.1:{free_port()}/0")):
        page.wait_for_selector("[data-rl=error]:not([hidden])")
        assert page.text_content("[data-rl=error]").startswith("Redis could not be read")
        assert page.is_visible(row(page, "login", IDENTITY))  # the last rows stay
    page.wait_for_selector("[data-rl=error]", state="hidden")
    assert page.is_visible(row(page, "login", IDENTITY))


def test_an_anonymous_browser_is_sent_to_the_login_page(page):
    page.goto(PAGE)
    assert page.url.endswith(f"/admin/login/?next={PAGE}")
    assert page.is_visible("#id_username")


def test_staff_without_the_permission_get_403(page, django_user_model):
    django_user_model.objects.create_user("clerk", password="pw", is_staff=True)
    log_in(page, "clerk", "pw")
    assert "Live counters" not in page.inner_text("#content")
    response = page.goto(PAGE)
    assert response is not None and response.status == 403


def with_shadow_policy(config: dict) -> dict:
    """Return ``config`` with ``preview``, a policy in shadow mode (2 an hour per address)."""
    preview = {"algorithm": "fixed_window", "rate": "2/h", "key": "ip", "mode": "shadow"}
    return {**config, "POLICIES": {**config["POLICIES"], "preview": preview}}


def test_the_charts_show_the_known_counts_and_follow_new_ones(page, admin_user, settings):
    settings.DJANGO_RL = with_shadow_policy(settings.DJANGO_RL)
    for _ in range(7):
        get_policy("login").hit(IDENTITY)  # 5 allowed, 2 denied
    for _ in range(5):
        get_policy("preview").hit(IDENTITY)  # 2 allowed, 3 shadow-denied
    assert history.flush() is True
    log_in(page, "admin", "password")
    page.goto(PAGE)

    def hour(policy: str, kind: str) -> str:
        return f'figure[data-policy="{policy}"] tr[data-kind="{kind}"] td[data-rl="hour"]'

    page.wait_for_selector('figure[data-policy="login"]')
    figures = page.eval_on_selector_all("figure.rl-chart", "all => all.map(f => f.dataset.policy)")
    assert figures == ["login", "preview"]
    assert [page.inner_text(hour("login", k)) for k in KINDS] == ["5", "2", "0"]
    assert [page.inner_text(hour("preview", k)) for k in KINDS] == ["2", "0", "3"]
    label = page.get_attribute('figure[data-policy="login"] svg', "aria-label")
    assert label.startswith("login, last hour: 5 allowed, 2 denied, 0 shadow-denied;")
    top = page.inner_text(f'figure[data-policy="preview"] li[data-identity="{IDENTITY}"]')
    assert top == f"{IDENTITY} 3"

    page.evaluate("window.notReloaded = true")
    for _ in range(2):
        get_policy("login").hit(IDENTITY)
    assert history.flush() is True
    page.wait_for_function(
        "(s) => document.querySelector(s).textContent === '4'", arg=hour("login", "denied")
    )
    assert page.inner_text(f'figure[data-policy="login"] li[data-identity="{IDENTITY}"]') == (
        f"{IDENTITY} 4"
    )
    assert page.evaluate("window.notReloaded") is True


def fill_for_screenshot(redis_client) -> None:
    """Make the kinds of rows an operator meets: denied, heavy, digested, stale, unconfigured."""
    for _ in range(5):
        get_policy("login").hit("ip:203.0.113.9")
    for _ in range(3):
        get_policy("login").hit("ip:198.51.100.23")
    for _ in range(9):
        get_policy("api").hit("user:42")
    get_policy("api").hit("user:7")
    for _ in range(2):
        get_policy("burst").hit("ip:192.0.2.10")
    get_policy("writes").hit(KEY_WITH_SPACES)
    redis_client.set("rl:login:{ip:198.51.100.4}:0badc0de", 3, px=1_500_000)
    redis_client.zadd("rl:export:{user:42}:1f2e3d4c", {"1000": 1}, nx=True)
    redis_client.pexpire("rl:export:{user:42}:1f2e3d4c", 600_000)
    fill_history()


def fill_history() -> None:
    """Write 45 minutes of made-up history (the charts of an hour of traffic), then the real."""
    now = int(time.time()) // 60
    counts: dict[tuple[str, int, str], int] = {}
    for minute in range(now - 45, now):
        wave = minute % 15
        counts[("login", minute, "a")] = 6 + (minute * 7) % 5
        counts[("login", minute, "d")] = 4 + wave % 5 if 4 <= wave <= 8 else 0
        counts[("api", minute, "a")] = 30 + (minute * 13) % 17 + 2 * wave
        counts[("api", minute, "d")] = (minute * 3) % 4
        counts[("preview", minute, "a")] = 12 + (minute * 5) % 7
        counts[("preview", minute, "s")] = 2 + wave // 3
    assert history.write(counts, {}) == set()
    for _ in range(4):
        get_policy("preview").hit("ip:192.0.2.10")
    for _ in range(3):
        get_policy("preview").hit("ip:198.51.100.23")
    assert history.flush() is True


def background(page: Page, selector: str) -> tuple[str, str]:
    """Return (the colour of --message-error-bg, the background of ``selector``'s first cell)."""
    return tuple(
        page.evaluate(
            """(selector) => {
                const probe = document.createElement("div");
                probe.style.background = "var(--message-error-bg)";
                document.body.append(probe);
                const wanted = getComputedStyle(probe).backgroundColor;
                probe.remove();
                const cell = document.querySelector(selector + " td");
                return [wanted, getComputedStyle(cell).backgroundColor];
            }""",
            selector,
        )
    )


def test_screenshot_and_the_admin_themes(
    browser, live_server, admin_client, redis_client, tmp_path, fresh_minute, settings
):
    settings.DJANGO_RL = with_shadow_policy(settings.DJANGO_RL)
    fill_for_screenshot(redis_client)
    cookie = admin_client.cookies["sessionid"].value
    colours = {}
    for scheme in ("light", "dark"):
        page = new_page(
            browser, live_server, color_scheme=scheme, viewport={"width": 1280, "height": 720}
        )
        try:
            host = live_server.url.split("//", 1)[1].split(":")[0]
            page.context.add_cookies(
                [{"name": "sessionid", "value": cookie, "domain": host, "path": "/"}]
            )
            page.goto(PAGE)
            denied = row(page, "login", "ip:203.0.113.9")
            page.wait_for_selector(f"{denied}.rl-denied")
            assert page.is_visible(row(page, "login", "ip:198.51.100.4") + ".rl-stale")
            assert page.is_visible(row(page, "export", "user:42") + ".rl-unconfigured")
            assert page.is_visible(row(page, "writes", safe_identity(KEY_WITH_SPACES)))
            wanted, got = background(page, denied)
            assert wanted == got  # the page paints with the admin's own variable
            colours[scheme] = got
            page.wait_for_selector('figure[data-policy="preview"] li[data-identity]')
            if scheme == "light":
                shot = tmp_path / "live-counters.png"
                page.screenshot(path=str(shot), full_page=True)
                assert shot.stat().st_size > 10_000
                charts = tmp_path / "charts.png"
                page.locator("[data-rl=history]").screenshot(path=str(charts))
                assert charts.stat().st_size > 10_000
                target = os.environ.get("DJANGO_RL_SCREENSHOT")
                if target:
                    shutil.copyfile(shot, Path(target))
                    shutil.copyfile(charts, Path(target).with_name(CHARTS_SHOT))
        finally:
            page.context.close()
    assert colours["light"] != colours["dark"]  # the dark theme applies


def test_times_are_shown_in_the_servers_time_zone_named_whatever_the_browsers(
    browser, live_server, admin_user, settings
):
    """The script's times (updated, the charts' minutes) are the server's, as its own text is."""
    import datetime
    import zoneinfo

    # The server's zone (Django's default here, America/Chicago; changing it
    # while the live server's threads run would call tzset() under them);
    # the browser's +05:45, which shares no minutes with it.
    server = settings.TIME_ZONE
    get_policy("login").hit(IDENTITY)
    assert history.flush() is True  # the charts have a minute to label
    page = new_page(browser, live_server, timezone_id="Asia/Kathmandu")
    try:
        log_in(page, "admin", "password")
        page.goto(PAGE)
        assert f"({server})" in page.inner_text(".rl-status")
        assert f"times in {server}" in page.inner_text("#rl-history-title")
        # Once a poll has answered, the time is the script's.
        first = page.get_attribute("[data-rl=updated]", "datetime")
        polled = "(first) => document.querySelector('[data-rl=updated]').dateTime !== first"
        page.wait_for_function(polled, arg=first)
        page.wait_for_selector(".rl-chart .rl-tick")
        now = datetime.datetime.now(zoneinfo.ZoneInfo(server))
        minutes = {(now + datetime.timedelta(minutes=d)).strftime("%H:%M") for d in (-1, 0, 1)}
        assert page.inner_text("[data-rl=updated]")[:5] in minutes
        ticks = page.eval_on_selector_all(".rl-chart .rl-tick", "ts => ts.map(t => t.textContent)")
        assert ticks[1] in minutes  # the last minute's label (the first minute's, then it)
        page.goto("/admin/django_rl/override/")
        assert f"Times in {server}" in page.inner_text("#content")
    finally:
        page.context.close()
