"""The catalog in a real browser: find, narrow, open, copy, go back in time, trust nothing hostile, fit a phone,
and pass axe-core's accessibility rules (no serious or critical violation)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from axe_playwright_python.sync_playwright import Axe

from tests.support.hostile_spaces import HOSTILE

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "var" / "screenshots"


def test_search_narrow_and_open(open_page):
    watched = open_page("/")
    page = watched.page
    box = page.locator("#home-q")
    box.fill("echo")
    box.press("Enter")
    page.wait_for_url(re.compile(r"/environments/\?q=echo"))
    assert "local/echo_env" in page.content()
    # Two facets: passing, then a tag; the URL holds both.
    page.goto("/environments/")
    page.locator(".facets a", has_text="Passing").click()
    page.locator(".facets details", has_text="Tag").locator("a", has_text="openenv").click()
    page.wait_for_url(re.compile(r"verdict=pass.*tag=openenv|tag=openenv.*verdict=pass"))
    cards = page.locator(".card h3 a:not(.verdict)").all_inner_texts()
    assert cards and all(name.startswith("local/") for name in cards)
    page.locator(".card h3 a", has_text="mcp_calculator").first.click()
    page.wait_for_url("**/environments/local/mcp_calculator/")
    assert page.get_by_role("heading", level=1).inner_text().startswith("local/mcp_calculator")
    assert page.locator("h3 code", has_text="add").count() == 1  # its MCP tools
    assert not watched.errors and not watched.dialogs


def test_copy_the_pip_line(open_page):
    watched = open_page("/environments/openenv/echo_env/", permissions=["clipboard-read", "clipboard-write"])
    page = watched.page
    pip = page.locator("#pull-pip").inner_text()
    assert pip.startswith("pip install git+") and re.search(r"@[0-9a-f]{40}$", pip)
    button = page.get_by_role("button", name="Copy client package, pinned")
    button.click()
    page.wait_for_function("document.querySelector('button[data-copy=\"pull-pip\"]').textContent === 'Copied'")
    assert page.evaluate("navigator.clipboard.readText()") == pip
    assert button.get_attribute("data-copied") == pip


def test_an_older_revision_and_its_pull_block(open_page):
    watched = open_page("/environments/local/flaky_echo/")
    page = watched.page
    banner = page.locator("#last-known-good")
    # The demo's owner yanked flaky_echo's failing head, so the banner gives that reason.
    assert "The current revision was yanked; an earlier one passed" in banner.inner_text()
    good_sha = banner.locator("a code").inner_text()
    head_note = page.locator("#pull-local_run").locator("xpath=..").locator("xpath=following-sibling::p").inner_text()
    page.locator(".revisions a", has_text=good_sha[:7]).click()
    page.wait_for_url(re.compile(r"\?revision="))
    assert "You are looking at an older revision" in page.locator(".banner.older").inner_text()
    older_note = page.locator("#pull-local_run").locator("xpath=..").locator("xpath=following-sibling::p").inner_text()
    assert good_sha[:12] in older_note and older_note != head_note  # the pull block followed the revision
    assert page.locator("#last-known-good").count() == 0


@pytest.mark.parametrize("path", [
    "/environments/evil/readme_script/", "/environments/evil/name_markup/",
    "/environments/?q=%3Cscript%3Ewindow.__xss%3D1%3C%2Fscript%3E", "/environments/?owner=evil",
    "/tags/%3Cimg%20src=x%20onerror=window.__xss=4%3E/", "report of evil/readme_script",
])
def test_hostile_content_renders_inert(open_page, path):
    if path.startswith("report of "):
        path = _run_id(open_page, f"/environments/{path.removeprefix('report of ')}/")
    watched = open_page(path)
    watched.page.wait_for_load_state("load")
    watched.page.mouse.move(200, 300)  # hover handlers, had any survived
    assert watched.xss() is None and watched.dialogs == []
    assert watched.page.locator("main script, main iframe, main form[action^='https://evil'], main svg").count() == 0


@pytest.mark.parametrize("repo_id", sorted(HOSTILE))
def test_every_hostile_space_of_the_stand_in_has_a_harmless_page(open_page, repo_id):
    watched = open_page(f"/environments/{repo_id}/")
    assert watched.page.locator("h1").count() == 1
    assert watched.xss() is None and watched.dialogs == [] and watched.errors == []


def test_the_hostile_readme_keeps_its_text_and_points_relative_links_at_the_hub(open_page):
    page = open_page("/environments/evil/readme_script/").page
    readme = page.locator(".readme-body")
    assert "Totally normal" in readme.inner_text()
    # Relative links resolve on the Hub (here its stand-in, on http) at the revision's sha.
    pinned = re.compile(r"^https?://[^/]+/spaces/evil/readme_script/resolve/[0-9a-f]{40}/")
    hrefs = readme.locator("a").evaluate_all("els => els.map(e => e.getAttribute('href'))")
    assert any(h and pinned.match(h) for h in hrefs), hrefs
    for href in hrefs:
        assert href is None or href.startswith(("https://", "#", "mailto:")) or pinned.match(href), href
    assert page.locator("h1").count() == 1  # the README's headings sit under the page's
    assert readme.locator("img[src^='data:'], img[onerror]").count() == 0


@pytest.mark.parametrize("path", ["/", "/environments/", "/environments/openenv/chess_env/",
                                  "/environments/local/flaky_echo/", "/environments/local/mcp_calculator/",
                                  "/environments/local/guess_number/leaderboard/"])
def test_phone_width_needs_no_horizontal_scrolling(open_page, path):
    page = open_page(path, width=360, height=740).page
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"{path} is {overflow}px wider than a 360px screen"


def _run_id(open_page, path: str) -> str:
    return open_page(path).page.locator(".runs a").first.get_attribute("href")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_no_serious_or_critical_accessibility_violation(open_page, scheme):
    report = _run_id(open_page, "/environments/local/echo_env/")
    pages = ["/", "/environments/", "/environments/?verdict=pass&tag=openenv", "/environments/local/echo_env/",
             "/environments/local/flaky_echo/", report, "/owners/local/", "/tags/openenv/", "/no/such/page/",
             "/environments/local/guess_number/", "/environments/local/guess_number/leaderboard/",
             _evaluation_path(open_page), "/models/acme/bisect-7b/"]
    axe = Axe()
    found = {}
    for path in pages:
        page = open_page(path, scheme=scheme, bypass_csp=True).page
        violations = axe.run(page).response["violations"]
        serious = [f"{v['id']} ({v['impact']}): {v['help']} at {v['nodes'][0]['target']}" for v in violations
                   if v["impact"] in ("serious", "critical")]
        if serious:
            found[path] = serious
    assert found == {}


def _evaluation_path(open_page) -> str:
    return open_page("/environments/local/guess_number/leaderboard/").page.locator(
        ".leaderboard tbody a[href*='/evaluations/']").first.get_attribute("href")


def test_the_leaderboard_ranks_with_interval_bars_and_filters_without_script(open_page):
    watched = open_page("/environments/local/guess_number/leaderboard/", java_script_enabled=False)
    page = watched.page
    rows = page.locator(".leaderboard tbody tr")
    agents = [rows.nth(i).locator("td").nth(1).locator("a").first.inner_text() for i in range(rows.count())]
    assert set(agents) == {"acme/bisect-7b", "random", "first-valid"}, agents
    assert page.locator(".leaderboard svg.ci[role=img]").count() == len(agents)
    label = page.locator(".leaderboard svg.ci").first.get_attribute("aria-label")
    assert label.startswith("mean ") and "95% interval" in label
    page.select_option("select[name=provenance]", "hub_run")
    page.get_by_role("button", name="Apply").click()  # a plain GET form: no script needed
    page.wait_for_url(re.compile(r"provenance=hub_run"))
    assert page.locator(".leaderboard tbody tr").count() == 2
    page.locator(".leaderboard tbody a[href*='/evaluations/']").first.click()
    assert page.locator("h2", has_text="Episodes").is_visible()
    assert page.locator("table tbody tr").count() == 10  # the demo's baseline: ten seeds


def signed_in(open_page, path: str, **options):
    """A page opened by the demo's staff account, signed in through the admin's sign-in form."""
    from tests.support.demo import STAFF_PASSWORD, STAFF_USER

    watched = open_page(f"/admin/login/?next={path}", **options)
    watched.page.fill("#id_username", STAFF_USER)
    watched.page.fill("#id_password", STAFF_PASSWORD)
    watched.page.click("input[type=submit]")
    watched.page.wait_for_url(f"**{path}")
    return watched


def test_owners_forms_and_the_account_page(open_page):
    page = signed_in(open_page, "/environments/local/flaky_echo/", bypass_csp=True).page
    assert page.locator("#yanked").is_visible() and page.locator("#last-known-good").is_visible()
    assert page.get_by_role("button", name="Restore revision").is_visible()
    assert page.locator("#manage-h").is_visible() and page.locator("#history-h").is_visible()
    page.goto("/account/")
    page.fill("#token-name", "browser test")
    page.click("text=Create token")
    secret = page.locator("code#new-token").inner_text()
    assert secret.startswith("oeh_")
    page.reload()  # shown once
    assert secret not in page.content()
    axe = Axe()
    for path in ("/account/", "/environments/local/flaky_echo/", "/environments/openenv/textarena_env/"):
        page.goto(path)
        serious = [v["id"] for v in axe.run(page).response["violations"] if v["impact"] in ("serious", "critical")]
        assert serious == [], (path, serious)


def test_a_deprecated_environment_points_at_its_successor(open_page):
    page = open_page("/environments/openenv/textarena_env/").page
    banner = page.locator("#deprecated")
    assert "Superseded" in banner.inner_text()
    banner.get_by_role("link", name="openenv/chess_env").click()
    page.wait_for_url("**/environments/openenv/chess_env/")


def test_screenshots_of_the_main_pages(open_page):
    """Written under var/screenshots/ for people to look at (`make screenshots`); this only checks they exist."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    report = _run_id(open_page, "/environments/local/mcp_calculator/")
    shots = {"home": "/", "browse": "/environments/?verdict=pass", "search": "/environments/?q=echo",
             "environment": "/environments/local/mcp_calculator/",
             "last-known-good": "/environments/local/flaky_echo/", "hub-space": "/environments/openenv/chess_env/",
             "report": report, "hostile": "/environments/evil/readme_script/", "not-found": "/environments/x/y/",
             "deprecated": "/environments/openenv/textarena_env/",
             "leaderboard": "/environments/local/guess_number/leaderboard/"}
    written = []
    for name, path in shots.items():
        for label, width in (("desktop", 1280), ("phone", 390)):
            for scheme in ("light", "dark"):
                page = open_page(path, width=width, scheme=scheme).page
                target = SCREENSHOTS / f"{name}-{label}-{scheme}.png"
                page.screenshot(path=str(target), full_page=True)
                written.append(target)
    assert all(p.stat().st_size > 10_000 for p in written)
