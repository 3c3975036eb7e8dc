"""Status badges: the pure module (SVG, shields.io's endpoint JSON, what each badge says) without a database;
the badge views and the environment page's embed snippets through Django's test client on the real database."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
from django.db import connection
from django.test import Client, TestCase
from django.test.utils import CaptureQueriesContext

from registry import badges, services
from registry.badges import Badge, Subject
from registry.models import Environment, Revision, ValidationRun
from registry.services import validation

SVG = "{http://www.w3.org/2000/svg}"

# shields.io's endpoint badge (https://shields.io/badges/endpoint-badge), as its documentation describes it.
SHIELDS_COLOR = r"^(brightgreen|green|yellowgreen|yellow|orange|red|blue|grey|gray|lightgrey|lightgray|" \
                r"success|important|critical|informational|inactive|[0-9a-fA-F]{3}|[0-9a-fA-F]{6})$"
ENDPOINT_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["schemaVersion", "label", "message", "color"],
    "additionalProperties": False,
    "properties": {
        "schemaVersion": {"const": 1},
        "label": {"type": "string"},
        "message": {"type": "string", "minLength": 1},
        "color": {"type": "string", "pattern": SHIELDS_COLOR},
        "labelColor": {"type": "string", "pattern": SHIELDS_COLOR},
        "isError": {"type": "boolean"},
        "namedLogo": {"type": "string"},
        "logoSvg": {"type": "string"},
        "logoColor": {"type": "string"},
        "logoSize": {"const": "auto"},
        "logoWidth": {"type": "integer"},
        "style": {"enum": ["flat", "flat-square", "plastic", "for-the-badge", "social"]},
        "cacheSeconds": {"type": "integer", "minimum": 300},
    },
}
jsonschema.Draft202012Validator.check_schema(ENDPOINT_SCHEMA)


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg" and root.get("role") == "img"
    return root


def title(root: ET.Element) -> str:
    found = root.find(f"{SVG}title")
    assert found is not None and found.text == root.get("aria-label")
    return found.text


def width(svg: str) -> int:
    return int(parse(svg).get("width"))


# --- the pure module --------------------------------------------------------------------------------------------


EVERY_BADGE = [badges.conformance_badge(s) for s in (
    Subject(outcome="pass"), Subject(outcome="warn"), Subject(outcome="fail"), Subject(outcome="error"),
    Subject(sleeping=True), Subject(), None)] + [badges.version_badge(s) for s in (
        Subject(version="1.2.3"), Subject(sha="a" * 40), None)]


@pytest.mark.parametrize("style", list(badges.STYLES))
@pytest.mark.parametrize("badge", EVERY_BADGE, ids=lambda b: b.title)
def test_every_badge_is_an_accessible_svg_and_endpoint_json(badge, style):
    root = parse(badges.badge_svg(badge, style=style))
    assert title(root) == f"{badge.label}: {badge.message}"
    shown = [t.text for t in root.iter(f"{SVG}text") if t.get("aria-hidden") != "true"]
    words = (badge.label, badge.message)
    assert shown == ([w.upper() for w in words] if style == "for-the-badge" else list(words))
    assert root.find(f".//{SVG}rect[@fill='{badges.PALETTE[badge.color].fill}']") is not None
    endpoint = badges.badge_endpoint(badge, style=style)
    jsonschema.validate(endpoint, ENDPOINT_SCHEMA)
    assert (endpoint["label"], endpoint["message"]) == words
    assert endpoint.get("style", "flat") == style


def test_the_styles_draw_as_shields_does():
    badge = badges.conformance_badge(Subject(outcome="pass"))
    flat, square, big = (parse(badges.badge_svg(badge, style=s)) for s in ("flat", "flat-square", "for-the-badge"))
    assert flat.get("height") == square.get("height") == "20" and big.get("height") == "28"
    assert flat.find(f"{SVG}clipPath") is not None and flat.find(f"{SVG}linearGradient") is not None
    assert square.find(f"{SVG}clipPath") is None and square.find(f"{SVG}linearGradient") is None
    assert len(list(flat.iter(f"{SVG}text"))) == 4 and len(list(square.iter(f"{SVG}text"))) == 2  # flat: shadows
    message = list(big.iter(f"{SVG}text"))[-1]
    assert message.get("font-weight") == "bold" and float(message.get("letter-spacing")) > 0
    assert int(big.get("width")) > int(flat.get("width"))
    assert badges.style_or_default("for-the-badge") == "for-the-badge"
    for junk in (None, "", "plastic", "FLAT", "flat\x00", "<svg>"):
        assert badges.style_or_default(junk) == "flat"
        assert badges.badge_svg(badge, style=junk) == badges.badge_svg(badge)


def test_width_is_measured_per_character_stable_and_growing():
    assert badges.text_width("conformance") == badges.text_width("conformance")
    assert badges.text_width("m") > badges.text_width("i") > 0
    assert badges.text_width("mmmm") == 4 * badges.text_width("m")
    assert badges.text_width("\u6f22") == badges.DEFAULT_WIDTH_11PX  # outside the table: one em
    assert badges.text_width("A", bold=True) > badges.text_width("A")
    sizes = [width(badges.badge_svg(Badge("v" * n, "passing", "brightgreen"))) for n in range(1, 12)]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)
    same = Badge("my label", "1.2.3", "blue")
    assert badges.badge_svg(same) == badges.badge_svg(Badge("my label", "1.2.3", "blue"))


@pytest.mark.parametrize("style", list(badges.STYLES))
def test_every_text_is_escaped(style):
    hostile = '<script>alert(1)</script> & "quoted" \'single\''
    badge = Badge(badges.custom_label(hostile), '"></text><svg onload=x>', "red")
    svg = badges.badge_svg(badge, style=style)
    assert "<script" not in svg and "<svg onload" not in svg
    root = parse(svg)
    assert title(root) == f"{badge.label}: {badge.message}" and badge.label.startswith("<script>alert(1)")
    assert len(list(root.iter())) == len(list(parse(badges.badge_svg(Badge("a", "b", "red"), style=style)).iter()))
    assert "&lt;script&gt;" in svg and "&amp;" in svg and "&quot;quoted&quot;" in svg


def test_labels_are_cleaned_and_capped():
    assert badges.custom_label(None) == "" and badges.custom_label("   ") == ""
    assert badges.custom_label(" my\tenv\n ") == "my env"
    # What XML cannot hold, and what would make a text read as another (a right-to-left override), goes.
    assert badges.custom_label("ok\x00\x1b\u202egnissap\ufffe") == "okgnissap"
    long = badges.custom_label("x" * 100)
    assert len(long) == badges.MAX_LABEL and long.endswith("…")
    parse(badges.badge_svg(Badge("a\x00b", "c\x07", "blue")))


def test_colors_come_from_the_palette_only():
    with pytest.raises(ValueError):
        Badge("label", "message", "#ff0000")
    with pytest.raises(ValueError):
        Badge("label", "message", 'red" onload="x')


@pytest.mark.parametrize(("subject", "message", "color"), [
    (Subject(outcome="pass"), "passing", "brightgreen"),
    (Subject(outcome="warn"), "warning", "yellow"),
    (Subject(outcome="fail"), "failing", "red"),
    (Subject(outcome="error"), "failing", "red"),
    (Subject(outcome="pass", sleeping=True), "passing", "brightgreen"),  # a verdict outranks sleep
    (Subject(sleeping=True), "sleeping", "bluegrey"),
    (Subject(), "not validated", "lightgrey"),
    (None, "unknown", "lightgrey"),
])
def test_what_the_conformance_badge_says(subject, message, color):
    badge = badges.conformance_badge(subject)
    assert (badge.label, badge.message, badge.color) == ("conformance", message, color)
    assert badges.conformance_badge(subject, label="OpenEnv").label == "OpenEnv"


@pytest.mark.parametrize(("subject", "message", "color"), [
    (Subject(version="1.2.3", sha="abcdef0123"), "1.2.3", "blue"),
    (Subject(version=2, sha="abcdef0123"), "2", "blue"),
    (Subject(version=1.5, sha="abcdef0123"), "1.5", "blue"),
    (Subject(version="", sha="abcdef0123"), "abcdef0", "blue"),
    (Subject(version="  ", sha="abcdef0123"), "abcdef0", "blue"),
    (Subject(version=True, sha="abcdef0123"), "abcdef0", "blue"),
    (Subject(version={"major": 1}, sha="abcdef0123"), "abcdef0", "blue"),
    (Subject(version=None, sha="abcdef0123"), "abcdef0", "blue"),
    (Subject(), "unknown", "lightgrey"),
    (None, "unknown", "lightgrey"),
])
def test_what_the_version_badge_says(subject, message, color):
    badge = badges.version_badge(subject)
    assert (badge.label, badge.message, badge.color) == ("version", message, color)


def test_a_long_version_is_cut():
    badge = badges.version_badge(Subject(version="1." * 100))
    assert len(badge.message) == badges.MAX_MESSAGE and badge.message.endswith("…")


def test_embed_snippets():
    markdown, html = badges.badge_embeds(image_url="https://hub.example/badges/a/b/conformance.svg",
                                         link_url="https://hub.example/environments/a/b/",
                                         alt='conformance of a/b [x] "y"', title="conformance")
    assert markdown.kind == "markdown" and html.kind == "html"
    assert markdown.text == ("[![conformance of a/b \\[x\\] \"y\"](https://hub.example/badges/a/b/conformance.svg)]"
                             "(https://hub.example/environments/a/b/)")
    assert html.text == ('<a href="https://hub.example/environments/a/b/"><img src="https://hub.example/badges/a/b/'
                         'conformance.svg" alt="conformance of a/b [x] &quot;y&quot;"></a>')
    assert markdown.label == "Markdown for the conformance badge" and html.label == "HTML for the conformance badge"


# --- the views --------------------------------------------------------------------------------------------------


@pytest.fixture
def client():
    return Client(HTTP_HOST="localhost")


def committed():
    """What follows a commit (the catalog version's bump) runs, as it would outside a test's transaction."""
    return TestCase.captureOnCommitCallbacks(execute=True)


def finished(revision: Revision, outcome: str) -> ValidationRun:
    with committed():
        run, _ = validation.validation_run_request(revision=revision, trigger="request")
        validation.validation_run_start(run_id=run.pk)
        validation.validation_run_finish(run_id=run.pk, outcome=outcome, report={"verdict": outcome, "results": []})
    return run


def synced() -> None:
    with committed():
        services.local_sync()


def svg_badge(client, path: str, **params) -> tuple[str, str]:
    """(label, message) of the SVG badge at path, after checking it answered 200 with a well-formed badge."""
    response = client.get(path, params)
    assert response.status_code == 200 and response["Content-Type"] == "image/svg+xml; charset=utf-8"
    root = parse(response.content.decode())
    label, message = title(root).split(": ", 1)
    return label, message


def json_badge(client, path: str, **params) -> dict:
    response = client.get(path, params)
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    body = response.json()
    jsonschema.validate(body, ENDPOINT_SCHEMA)
    return body


@pytest.mark.django_db
def test_conformance_badges_follow_the_verdict(client, tiny_envs):
    alpha = tiny_envs
    beta = Environment.objects.select_related("head").get(key="local/beta")
    assert svg_badge(client, "/badges/local/alpha/conformance.svg") == ("conformance", "not validated")
    finished(alpha.head, "pass")
    finished(beta.head, "error")
    assert svg_badge(client, "/badges/local/alpha/conformance.svg") == ("conformance", "passing")
    assert svg_badge(client, "/badges/local/beta/conformance.svg") == ("conformance", "failing")
    assert json_badge(client, "/badges/local/alpha/conformance.json") == {
        "schemaVersion": 1, "label": "conformance", "message": "passing", "color": "brightgreen",
        "labelColor": "grey"}
    assert json_badge(client, "/badges/local/beta/conformance.json")["color"] == "red"
    # Owner and name are case-insensitive, as on the Hub.
    assert svg_badge(client, "/badges/Local/ALPHA/conformance.svg") == ("conformance", "passing")


@pytest.mark.django_db
def test_a_sleeping_space_without_a_verdict(client, tiny_envs):
    Environment.objects.filter(key="local/alpha").update(runtime_stage="SLEEPING")
    assert svg_badge(client, "/badges/local/alpha/conformance.svg") == ("conformance", "sleeping")
    assert json_badge(client, "/badges/local/alpha/conformance.json")["color"] == "607d8b"


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/badges/nobody/nothing/conformance.svg", "/badges/nobody/nothing/version.svg",
                                  "/badges/nobody/nothing/conformance.json", "/badges/nobody/nothing/version.json"])
def test_an_unknown_environment_is_a_grey_unknown_badge_not_an_error(client, tiny_envs, path):
    if path.endswith(".svg"):
        assert svg_badge(client, path)[1] == "unknown"
    else:
        body = json_badge(client, path)
        assert (body["message"], body["color"]) == ("unknown", "lightgrey")


@pytest.mark.django_db
def test_version_badge_from_the_manifest_else_the_short_sha(client, tiny_envs):
    alpha = tiny_envs
    assert svg_badge(client, "/badges/local/alpha/version.svg") == ("version", alpha.head.sha[:7])
    assert json_badge(client, "/badges/local/alpha/version.json")["message"] == alpha.head.sha[:7]
    Path(alpha.local_path, "openenv.yaml").write_text("name: alpha\nversion: 1.2.3\n")
    synced()
    assert svg_badge(client, "/badges/local/alpha/version.svg") == ("version", "1.2.3")
    assert json_badge(client, "/badges/local/alpha/version.json") == {
        "schemaVersion": 1, "label": "version", "message": "1.2.3", "color": "blue", "labelColor": "grey"}
    # A number, as YAML reads `version: 2.0`, is shown as written there.
    Path(alpha.local_path, "openenv.yaml").write_text("name: alpha\nversion: 2.5\n")
    synced()
    assert svg_badge(client, "/badges/local/alpha/version.svg") == ("version", "2.5")


@pytest.mark.django_db
def test_a_revision_badge_describes_that_revision(client, tiny_envs):
    alpha = tiny_envs
    old = alpha.head
    Path(alpha.local_path, "openenv.yaml").write_text("name: alpha\nversion: 0.2.0\n")
    synced()
    alpha.refresh_from_db()
    assert alpha.head != old
    finished(old, "pass")
    finished(alpha.head, "fail")
    assert svg_badge(client, "/badges/local/alpha/conformance.svg") == ("conformance", "failing")
    assert svg_badge(client, "/badges/local/alpha/version.svg") == ("version", "0.2.0")
    for ref in (old.sha, old.sha[:10], old.sha[:10].upper()):
        assert svg_badge(client, "/badges/local/alpha/conformance.svg", revision=ref) == ("conformance", "passing")
        assert svg_badge(client, "/badges/local/alpha/version.svg", revision=ref) == ("version", old.sha[:7])
    assert svg_badge(client, "/badges/local/alpha/version.svg", revision=alpha.head.sha) == ("version", "0.2.0")
    # A revision never validated is not validated, whatever the environment's verdict.
    Path(alpha.local_path, "openenv.yaml").write_text("name: alpha\nversion: 0.3.0\n")
    synced()
    alpha.refresh_from_db()
    Environment.objects.filter(pk=alpha.pk).update(runtime_stage="SLEEPING")
    assert svg_badge(client, "/badges/local/alpha/conformance.svg", revision=alpha.head.sha[:8]) == (
        "conformance", "sleeping")
    assert svg_badge(client, "/badges/local/alpha/conformance.svg", revision=old.sha) == ("conformance", "passing")
    # Unknown and malformed revisions, or another environment's: grey unknown, status 200.
    beta_sha = Environment.objects.get(key="local/beta").head.sha
    for ref in ("f" * 40, beta_sha, "xyz", "ab", "\x00"):
        assert svg_badge(client, "/badges/local/alpha/conformance.svg", revision=ref)[1] == "unknown"
        assert json_badge(client, "/badges/local/alpha/version.json", revision=ref)["message"] == "unknown"


@pytest.mark.django_db
def test_an_ambiguous_revision_prefix_is_unknown(client, tiny_envs):
    first = tiny_envs.head
    # A second revision whose sha shares its first six characters with the head's (Hub shas are 40 hex).
    twin = first.sha[:6] + ("0" if first.sha[6] != "0" else "1") * 34
    Revision.objects.create(environment=tiny_envs, sha=twin, content_digest="0" * 64)
    assert svg_badge(client, "/badges/local/alpha/version.svg", revision=first.sha[:6]) == ("version", "unknown")
    assert svg_badge(client, "/badges/local/alpha/version.svg", revision=first.sha[:7]) == (
        "version", first.sha[:7])
    assert svg_badge(client, "/badges/local/alpha/conformance.svg", revision=twin) == (
        "conformance", "not validated")


@pytest.mark.django_db
def test_style_and_label_options(client, tiny_envs):
    finished(tiny_envs.head, "pass")
    path = "/badges/local/alpha/conformance.svg"
    big = parse(client.get(path, {"style": "for-the-badge"}).content.decode())
    assert big.get("height") == "28" and [t.text for t in big.iter(f"{SVG}text")] == ["CONFORMANCE", "PASSING"]
    square = client.get(path, {"style": "flat-square"}).content.decode()
    assert 'shape-rendering="crispEdges"' in square and "clipPath" not in square
    assert client.get(path, {"style": "bogus"}).content == client.get(path).content
    assert json_badge(client, "/badges/local/alpha/conformance.json", style="for-the-badge")["style"] == "for-the-badge"
    assert "style" not in json_badge(client, "/badges/local/alpha/conformance.json", style="bogus")
    assert svg_badge(client, path, label="OpenEnv") == ("OpenEnv", "passing")
    assert json_badge(client, "/badges/local/alpha/conformance.json", label="OpenEnv")["label"] == "OpenEnv"
    assert svg_badge(client, path, label="") == ("conformance", "passing")
    hostile = client.get(path, {"label": '<script>alert("x")</script>&' + "y" * 80}).content.decode()
    label, _ = title(parse(hostile)).split(": ", 1)
    assert len(label) == badges.MAX_LABEL and "<script>" not in hostile and "&lt;script&gt;" in hostile


@pytest.mark.django_db
@pytest.mark.parametrize(("path", "content_type"), [
    ("/badges/local/alpha/conformance.svg", "image/svg+xml; charset=utf-8"),
    ("/badges/local/alpha/version.json", "application/json"),
    ("/badges/nobody/nothing/conformance.svg", "image/svg+xml; charset=utf-8"),
])
def test_headers_caching_and_no_cookies(client, tiny_envs, path, content_type):
    response = client.get(path)
    assert response.status_code == 200 and response["Content-Type"] == content_type
    assert response["Cache-Control"] == "public, max-age=300"
    etag = response["ETag"]
    assert etag.startswith('"') and etag.endswith('"') and len(etag) > 10
    assert client.get(path)["ETag"] == etag  # the same body, the same tag
    assert "Set-Cookie" not in response and not response.cookies and not client.cookies
    assert "Cookie" not in response.get("Vary", "")
    assert response["Access-Control-Allow-Origin"] == "*"  # any page's script may read it (shields.io's endpoint)
    for sent in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        again = client.get(path, HTTP_IF_NONE_MATCH=sent)
        assert again.status_code == 304 and again.content == b"" and again["ETag"] == etag
        assert again["Cache-Control"] == "public, max-age=300" and "Set-Cookie" not in again
    assert client.get(path, HTTP_IF_NONE_MATCH='"other"').status_code == 200
    # Another badge body, another tag.
    assert client.get(path, {"style": "for-the-badge"})["ETag"] != etag
    assert client.head(path).status_code == 200
    assert client.post(path).status_code == 405


@pytest.mark.django_db
def test_a_signed_in_visitor_gets_the_same_cookieless_badge(client, tiny_envs, django_user_model):
    client.force_login(django_user_model.objects.create_user("staff", is_staff=True))
    response = client.get("/badges/local/alpha/conformance.svg")
    assert response.status_code == 200 and "Set-Cookie" not in response and not response.cookies
    assert "Cookie" not in response.get("Vary", "")


@pytest.mark.django_db
@pytest.mark.parametrize("params", [{}, {"style": "for-the-badge", "label": "x"}])
@pytest.mark.parametrize("path", ["/badges/local/alpha/conformance.svg", "/badges/local/alpha/version.json",
                                  "/badges/nobody/nothing/version.svg"])
def test_a_badge_costs_one_query(client, tiny_envs, path, params):
    finished(tiny_envs.head, "pass")
    with CaptureQueriesContext(connection) as queries:
        assert client.get(path, params).status_code == 200
    assert len(queries) == 1, [q["sql"] for q in queries]


@pytest.mark.django_db
def test_a_badge_is_remembered_until_the_catalog_changes(client, tiny_envs, monkeypatch):
    from registry import selectors

    monkeypatch.setattr(selectors, "BADGE_VERSION_S", 1.0)
    path = "/badges/local/alpha/conformance.svg"
    assert svg_badge(client, path) == ("conformance", "not validated")
    with CaptureQueriesContext(connection) as queries:
        assert svg_badge(client, path, style="flat-square") == ("conformance", "not validated")
    assert len(queries) == 0, [q["sql"] for q in queries]  # the same subject, another style: no query
    finished(tiny_envs.head, "pass")  # bumps the catalog version after its commit
    assert svg_badge(client, path) == ("conformance", "not validated")  # the version is read once a second
    selectors._badge_version[0] -= selectors.BADGE_VERSION_S
    assert svg_badge(client, path) == ("conformance", "passing")
    # A change the version does not hear of (another process's memory, without a shared cache) shows within
    # BADGE_MEMO_S.
    Environment.objects.filter(pk=tiny_envs.pk).update(verdict_outcome="fail")
    assert svg_badge(client, path) == ("conformance", "passing")
    for key, (expires, subject) in list(selectors._badge_memo.items()):
        selectors._badge_memo[key] = (expires - selectors.BADGE_MEMO_S, subject)
    assert svg_badge(client, path) == ("conformance", "failing")


@pytest.mark.django_db
def test_a_revision_badge_costs_one_query_more(client, tiny_envs):
    finished(tiny_envs.head, "pass")
    with CaptureQueriesContext(connection) as queries:
        assert svg_badge(client, "/badges/local/alpha/conformance.svg", revision=tiny_envs.head.sha[:8]) == (
            "conformance", "passing")
    assert len(queries) == 2, [q["sql"] for q in queries]
    # The heavy columns of a revision (README, files, raw manifest) are never read for a badge.
    assert all("readme" not in q["sql"] and "manifest_raw" not in q["sql"] for q in queries)


@pytest.mark.django_db
def test_the_environment_page_shows_the_embed_snippets(client, tiny_envs, settings):
    settings.SITE_URL = "https://hub.example"
    finished(tiny_envs.head, "pass")
    page = client.get("/environments/local/alpha/").content.decode()
    section = page.split('id="badges-h"')[1].split("</section>")[0]
    assert "arrive with" not in section
    for kind, words in (("conformance", "conformance: passing"), ("version", f"version: {tiny_envs.head.sha[:7]}")):
        image = f"https://hub.example/badges/local/alpha/{kind}.svg"
        link = "https://hub.example/environments/local/alpha/"
        assert f'<img src="/badges/local/alpha/{kind}.svg" alt="{words}">' in section
        markdown = f"[![{kind} of local/alpha on OpenEnv Hub]({image})]({link})"
        html = f'<a href="{link}"><img src="{image}" alt="{kind} of local/alpha on OpenEnv Hub"></a>'
        assert f'<code id="badge-{kind}-markdown" data-kind="markdown">{markdown}</code>' in section
        # Shown as text: the page escapes it, and the copy button copies the text itself.
        escaped = html.replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
        assert f'<code id="badge-{kind}-html" data-kind="html">{escaped}</code>' in section
        for snippet in ("markdown", "html"):
            assert f'data-copy="badge-{kind}-{snippet}"' in section
        assert f"https://hub.example/badges/local/alpha/{kind}.json" in section
        # The preview the page links to is the badge it describes.
        assert svg_badge(client, f"/badges/local/alpha/{kind}.svg") == tuple(words.split(": ", 1))
