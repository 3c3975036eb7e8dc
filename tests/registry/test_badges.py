"""Status badges: the pure module (SVG, shields.io's endpoint JSON, what each badge says) without a database;
the badge views and the environment page's embed snippets through Django's test client on the real database."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import jsonschema
import pytest

from registry import badges
from registry.badges import Badge, Subject

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
