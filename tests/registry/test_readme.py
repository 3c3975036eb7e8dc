"""The README renderer: hostile Markdown and HTML come out inert, real READMEs keep their structure."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from registry import readme
from registry.readme import RepoRef, readme_text, render_readme

CORPUS = Path(__file__).resolve().parents[1] / "data" / "openenv-envs"
CORPUS_NAMES = sorted(p.name for p in CORPUS.iterdir() if p.is_dir())
SHA = "0123456789abcdef0123456789abcdef01234567"
REPO = RepoRef("openenv", "echo_env", SHA)
HUB = f"https://huggingface.co/spaces/openenv/echo_env/resolve/{SHA}/"

ALLOWED_TAGS = {
    "h1", "h2", "h3", "h4", "h5", "h6", "p", "br", "hr", "blockquote", "ul", "ol", "li", "a", "img", "code", "pre",
    "kbd", "em", "strong", "del", "sup", "sub", "table", "thead", "tbody", "tr", "th", "td", "details", "summary",
    "div", "span",
}
FORBIDDEN_TAGS = {
    "script", "style", "iframe", "object", "embed", "form", "input", "button", "meta", "base", "link", "svg", "math",
}
URL_ATTRIBUTES = {
    "href", "src", "action", "formaction", "xlink:href", "srcset", "poster", "data", "background", "cite",
    "lowsrc", "dynsrc", "codebase", "ping",
}


class Elements(HTMLParser):
    """Every element and attribute of a fragment, as a browser's tokenizer sees them (character references decoded)."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def tags(self, name: str) -> list[dict[str, str | None]]:
        return [attrs for tag, attrs in self.elements if tag == name]

    def urls(self) -> list[str]:
        return [value or "" for _, attrs in self.elements for name, value in attrs.items() if name in URL_ATTRIBUTES]


def scheme(url: str) -> str | None:
    """The scheme a browser would read: C0 controls and spaces trimmed, tabs and newlines removed inside."""
    url = re.sub(r"[\t\n\r]", "", url.strip("".join(map(chr, range(0x21)))))
    match = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", url)
    return match.group(1).lower() if match else None


def assert_inert(html: str) -> None:
    doc = Elements(html)
    for tag, attrs in doc.elements:
        assert tag not in FORBIDDEN_TAGS, html
        assert tag in ALLOWED_TAGS, html
        for name in attrs:
            assert not name.startswith("on"), html
            assert name != "style", html
    for url in doc.urls():
        assert url.startswith(("https://", "http://", "mailto:", "#readme-")), html
        assert scheme(url) in (None, "http", "https", "mailto"), html


XSS = [
    "[x](javascript:alert(1))",
    "[x](JaVaScRiPt:alert(1))",
    "[x](&#106;avascript:alert(1))",
    "[x](&#x6A;&#x61;vascript:alert(1))",
    "[x](javascript&colon;alert(1))",
    "[x](java\tscript:alert(1))",
    "[x](<java\nscript:alert(1)>)",
    "[x](vbscript:msgbox(1))",
    "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "![x](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+)",
    "![x](data:image/png;base64,iVBORw0KGgo=)",
    '![x](x.png "t\\" onerror=\\"alert(1)")',
    "<javascript:alert(1)>",
    "<JAVASCRIPT:alert(1)>",
    "[x][evil]\n\n[evil]: javascript:alert(1)",
    "[x][evil]\n\n[evil]: <data:text/html,<script>alert(1)</script>>",
    "<img src=x onerror=alert(1)>",
    "<IMG SRC=JaVaScRiPt:alert('XSS')>",
    "<IMG SRC=&#106;&#97;&#118;&#97;&#115;&#99;&#114;&#105;&#112;&#116;&#58;&#97;&#108;&#101;&#114;&#116;&#40;&#49;&#41;>",
    "<IMG SRC=&#0000106&#0000097&#0000118&#0000097&#0000115&#0000099&#0000114&#0000105&#0000112&#0000116&#0000058alert(1)>",
    '<IMG SRC="jav&#x0D;ascript:alert(1);">',
    '<img src="x:alert(1)" onerror="eval(src)">',
    '<img srcset="javascript:alert(1) 1x" src="https://ok.example/a.png">',
    "<svg onload=alert(1)>",
    '<svg><a xlink:href="javascript:alert(1)"><text x="20" y="20">x</text></a></svg>',
    "<svg><script>alert(1)</script></svg>",
    "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
    '<math href="javascript:alert(1)">x</math>',
    '<a href="javascript:alert(1)">x</a>',
    '<a href="jav&#x09;ascript:alert(1)">x</a>',
    '<a href="jav&#x0A;ascript:alert(1)">x</a>',
    '<a href=" &#14;  javascript:alert(1)">x</a>',
    '<a href="\x01javascript:alert(1)">x</a>',
    '<a href="javascript&colon;alert(1)">x</a>',
    '<a href="data:text/html,<script>alert(1)</script>">x</a>',
    '<a href="vbscript:msgbox(1)">x</a>',
    '<iframe src="https://evil.example"></iframe>',
    '<iframe srcdoc="<script>alert(1)</script>"></iframe>',
    '<object data="javascript:alert(1)"></object><embed src="javascript:alert(1)">',
    '<form action="javascript:alert(1)"><button formaction="javascript:alert(1)">go</button><input type=submit></form>',
    '<meta http-equiv="refresh" content="0;url=javascript:alert(1)">',
    '<base href="javascript:alert(1)//">',
    '<link rel=stylesheet href="javascript:alert(1)">',
    '<style>body{background:url("javascript:alert(1)")}</style>',
    '<div style="background:url(javascript:alert(1))">x</div>',
    '<span style="position:fixed;top:0">x</span>',
    "<details open ontoggle=alert(1)><summary>s</summary>x</details>",
    "<BODY ONLOAD=alert('XSS')>",
    '<div align="center" onclick="alert(1)" class="x" id="main">x</div>',
    '<table><td background="javascript:alert(1)">x</td></table>',
    "<!-- --><script>alert(1)</script><!-- -->",
    "<!--<script>-->alert(1)<!--</script>-->",
    "<scr<script>ipt>alert(1)</scr</script>ipt>",
    '<noscript><p title="</noscript><img src=x onerror=alert(1)>"></noscript>',
    "<xmp><img src=x onerror=alert(1)></xmp>",
    "<template><script>alert(1)</script></template>",
    '<video poster="javascript:alert(1)"><source src="javascript:alert(1)"></video>',
    "```\"><img src=x onerror=alert(1)>\nx\n```",
    '<a href="https://ok.example" target="_blank" ping="https://tracker.example">x</a>',
    "[x](//evil.example/%0a%0d<script>)",
]


@pytest.mark.parametrize("source", XSS)
@pytest.mark.parametrize("repo", [REPO, None], ids=["hub", "local"])
def test_xss_vectors_come_out_inert(source, repo):
    assert len(XSS) >= 25
    assert_inert(render_readme(source, repo=repo))


def test_code_keeps_only_language_classes():
    html = render_readme('```python\nx\n```\n\n<code class="language-rust evil">y</code>', repo=REPO)
    assert [attrs.get("class") for attrs in Elements(html).tags("code")] == ["language-python", "language-rust"]
    html = render_readme('<code class="btn">z</code>', repo=REPO)
    assert Elements(html).tags("code") == [{}]


def test_links_and_images_get_their_safety_attributes():
    doc = Elements(render_readme("[a](https://example.com) ![b](https://example.com/b.png)", repo=REPO))
    assert doc.tags("a") == [{"href": "https://example.com", "rel": "nofollow noopener noreferrer"}]
    [image] = doc.tags("img")
    assert image["loading"] == "lazy" and image["referrerpolicy"] == "no-referrer"


def test_alignment_is_kept_as_align_and_nothing_else():
    html = render_readme('| a | b | c |\n|:--|:-:|--:|\n| 1 | 2 | 3 |\n\n<p align="center">x</p><div align="javascript">y</div>',
                         repo=REPO)
    doc = Elements(html)
    assert [attrs.get("align") for attrs in doc.tags("td")] == ["left", "center", "right"]
    assert doc.tags("p")[-1] == {"align": "center"}
    assert doc.tags("div") == [{}]


def test_raw_html_tables_and_formatting_keep_their_shape():
    source = ('<table>\n<tr><th align="center">Model</th><TH>Score</TH></tr>\n<tr><td>\n\n**big** [a](docs/a.md)\n\n</td>'
              '<td><em>1</em> <code class="language-py">x</code> <a href="https://e.example">e</a></td></tr>\n</table>')
    doc = Elements(render_readme(source, repo=REPO))
    assert [tag for tag, _ in doc.elements] == ["table", "tr", "th", "th", "tr", "td", "p", "strong", "a", "td", "em",
                                                 "code", "a"]
    assert doc.tags("th")[0] == {"align": "center"}
    assert doc.tags("code") == [{"class": "language-py"}]
    rel = "nofollow noopener noreferrer"
    assert doc.tags("a") == [{"href": HUB + "docs/a.md", "rel": rel}, {"href": "https://e.example", "rel": rel}]


def test_raw_tag_names_in_attribute_values_survive_the_disguise():
    doc = Elements(render_readme('<img src="https://e.example/x.png" alt="<table> and <a href>">', repo=REPO))
    assert doc.tags("img")[0]["alt"] == "<table> and <a href>"


def test_open_formatting_elements_are_not_multiplied():
    # In HTML5 proper, each of these <div>s would re-open all 1000 <em>s: a million elements from 30 KB.
    source = "<div>" + "".join(f'<em title="{i}">' for i in range(1000)) + "</div>" + "<div>a</div>" * 999
    assert len(render_readme(source, repo=REPO)) < 2 * len(source)


def test_strikethrough_and_tables_are_gfm():
    doc = Elements(render_readme("~~gone~~\n\n| a |\n|---|\n| 1 |", repo=REPO))
    assert [tag for tag, _ in doc.elements] == ["p", "del", "table", "thead", "tr", "th", "tbody", "tr", "td"]


# --- Relative URLs ----------------------------------------------------------------------------------------


def href(source: str, repo: RepoRef | None = REPO) -> str | None:
    [link] = Elements(render_readme(source, repo=repo)).tags("a")
    return link.get("href")


@pytest.mark.parametrize(
    "target, expected",
    [
        ("docs/x.png", HUB + "docs/x.png"),
        ("./docs/x.png", HUB + "docs/x.png"),
        ("../x.png", HUB + "x.png"),
        ("../../../../etc/passwd", HUB + "etc/passwd"),
        ("docs/../../x.png", HUB + "x.png"),
        ("docs/%2e%2e/%2e%2e/x.png", HUB + "x.png"),
        ("/docs/x.png", HUB + "docs/x.png"),
        ("docs/x.png?raw=1&v=2#frag", HUB + "docs/x.png?raw=1&v=2#frag"),
        ("<docs/my file.png>", HUB + "docs/my%20file.png"),
        ("docs/my%20file.png", HUB + "docs/my%20file.png"),
        ("docs/caf\u00e9/\u56fe.png", HUB + "docs/caf%C3%A9/%E5%9B%BE.png"),
        ("docs/a%2Fb.png", HUB + "docs/a%2Fb.png"),
        ("docs/", HUB + "docs/"),
        ("//cdn.example/x.png", "https://cdn.example/x.png"),
        ("https://example.com/x", "https://example.com/x"),
        ("mailto:someone@example.com", "mailto:someone@example.com"),
        ("#section", "#readme-section"),
        ("#readme-section", "#readme-readme-section"),
    ],
)
def test_relative_links_point_at_the_commit(target, expected):
    assert href(f"[x]({target})") == expected


def test_backslashes_cannot_make_a_scheme_relative_url():
    # Browsers read `\\` as `//` in http(s) URLs: left relative, `\\evil.example/x` would leave the Hub.
    assert href('<a href="\\\\evil.example/x">x</a>') == HUB + "%5C%5Cevil.example/x"
    assert href('<a href="/\\evil.example">x</a>') == HUB + "%5Cevil.example"
    assert href('<a href="\\\\evil.example/x">x</a>', None) is None


def test_raw_html_relative_urls_are_rewritten_too():
    doc = Elements(render_readme('<a href="docs/a b.md">a</a> <img src="./assets/x.gif" width="45%">', repo=REPO))
    assert doc.tags("a")[0]["href"] == HUB + "docs/a%20b.md"
    assert doc.tags("img")[0]["src"] == HUB + "assets/x.gif"
    assert doc.tags("img")[0]["width"] == "45%"


def test_the_endpoint_and_repo_parts_are_parameters():
    repo = RepoRef("some one", "my env", "abc", endpoint="https://hub.example/")
    assert href("[x](a.md)", repo) == "https://hub.example/spaces/some%20one/my%20env/resolve/abc/a.md"


def test_local_sources_drop_relative_targets_but_keep_text():
    html = render_readme("[docs](docs/x.md) ![pic](x.png) [top](#top) [ext](https://e.example) ![b](https://e.example/b.png)\n\n"
                         '<img src="assets/y.png" alt="y"> <a href="../z">z</a>', repo=None)
    doc = Elements(html)
    assert [link.get("href") for link in doc.tags("a")] == [None, "#readme-top", "https://e.example", None]
    assert [image["src"] for image in doc.tags("img")] == ["https://e.example/b.png"]
    assert "docs" in "".join(doc.text) and "z" in "".join(doc.text)


def test_images_with_refused_sources_are_dropped():
    doc = Elements(render_readme('![x](data:image/png;base64,AA==) <img src="javascript:x" alt="a > b"> ok', repo=REPO))
    assert doc.tags("img") == []
    assert "ok" in "".join(doc.text)


# --- Headings ---------------------------------------------------------------------------------------------


def ids(html: str) -> list[str]:
    return [attrs["id"] for tag, attrs in Elements(html).elements if "id" in attrs]


def test_heading_ids_are_prefixed_unique_and_github_shaped():
    source = "# Quick Start\n## Quick Start\nQuick Start\n---\n## `reset()` & step!\n## 🔥 Why?\n## Café ü\n## !!!\n## a-1\n## a\n## a"
    assert ids(render_readme(source, repo=REPO)) == [
        "readme-quick-start", "readme-quick-start-1", "readme-quick-start-2", "readme-reset--step",
        "readme--why", "readme-café-ü", "readme-section", "readme-a-1", "readme-a", "readme-a-2",
    ]


def test_fragment_links_find_their_headings():
    html = render_readme("## Readme Setup\n## Café\n[a](#readme-setup) [b](#café) [c](#missing)", repo=REPO)
    assert ids(html) == ["readme-readme-setup", "readme-café"]
    assert [link["href"] for link in Elements(html).tags("a")] == ["#readme-readme-setup", "#readme-caf%C3%A9",
                                                                    "#readme-missing"]


def test_raw_html_ids_cannot_escape_the_prefix():
    assert ids(render_readme('<h2 id="main-content">x</h2>\n\n<span id="x">y</span>', repo=REPO)) == ["readme-main-content"]


def test_many_equal_headings_stay_unique():
    found = ids(render_readme("## Example\n" * 3000, repo=REPO))
    assert len(set(found)) == 3000 and found[-1] == "readme-example-2999"


# --- Front-matter and text --------------------------------------------------------------------------------


def test_front_matter_is_stripped_defensively():
    html = render_readme("---\ntitle: Echo\nsdk: docker\n---\n# Echo\n", repo=REPO)
    assert "sdk" not in html and ids(html) == ["readme-echo"]
    assert "<hr>" in render_readme("text\n\n---\n\nmore", repo=REPO)


def test_readme_text_has_words_not_markup_nor_code_blocks():
    source = ("---\ntitle: x\n---\n# Echo *env*\n\nSee [the docs](https://e.example/docs) and `reset()`.\n"
              "![badge](https://e.example/b.svg)\n\n```python\nsecret_code()\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
              "<div align=center><b>bold</b> &amp; <script>alert(1)</script></div>")
    assert readme_text(source, limit=1000) == "Echo env See the docs and reset(). a b 1 2 bold &"


def test_readme_text_respects_the_limit():
    text = readme_text("word " * 10_000, limit=100)
    assert len(text) <= 100 and text.startswith("word word")
    assert readme_text("short", limit=100) == "short"
    with pytest.raises(ValueError):
        readme_text("x", limit=0)


# --- The real READMEs -------------------------------------------------------------------------------------


def relative_targets(source: str) -> list[str]:
    """Relative link and image targets as a CommonMark parser finds them, plus raw <img src>."""
    targets = []
    tokens = MarkdownIt("commonmark").enable("table").parse(source)
    for token in tokens:
        for child in token.children or []:
            url = child.attrGet("href") if child.type == "link_open" else child.attrGet("src")
            if child.type in ("link_open", "image") and url and not re.match(r"[a-z]+:|#|//", str(url)):
                targets.append(str(url))
    return targets + re.findall(r'<img[^>]*\ssrc="(?![a-z]+:)([^"]+)"', source)


def clamped(target: str) -> str:
    parts: list[str] = []
    for segment in re.split(r"[?#]", target)[0].split("/"):
        if segment == "..":
            parts = parts[:-1]
        elif segment not in ("", "."):
            parts.append(segment)
    return "/".join(parts)


@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_real_readmes_keep_their_structure(name):
    source = (CORPUS / name / "README.md").read_text()
    repo = RepoRef("openenv", name, SHA)
    html = render_readme(source, repo=repo)
    assert_inert(html)
    doc = Elements(html)
    tags = {tag for tag, _ in doc.elements}
    assert tags & {"h1", "h2"}
    if "```" in source:
        assert doc.tags("pre") and doc.tags("code")
    if re.search(r"^\|?\s*:?-{3,}:?\s*\|", source, re.MULTILINE):
        assert doc.tags("table") and doc.tags("th")
    if re.search(r"\]\(https?://", source):
        assert any((link.get("href") or "").startswith("http") for link in doc.tags("a"))
    hub = f"https://huggingface.co/spaces/openenv/{name}/resolve/{SHA}/"
    urls = doc.urls()
    for target in relative_targets(source):
        assert any(url.startswith(hub + clamped(target)) for url in urls), target
    heading_ids = set(ids(html))
    for url in urls:
        assert url.startswith((hub, "https://", "http://", "mailto:", "#readme-")), url
        if url.startswith("#"):
            assert url[1:] in heading_ids, f"{url} points at no heading"  # the README's own table of contents works
    assert len(heading_ids) == len(ids(html))


def test_the_corpus_has_relative_links_and_images_to_rewrite():
    found = {name: relative_targets((CORPUS / name / "README.md").read_text()) for name in CORPUS_NAMES}
    assert len(CORPUS_NAMES) == 34
    assert sum(1 for targets in found.values() if targets) >= 5
    assert any(target.startswith("../") for targets in found.values() for target in targets)
    assert any(target.startswith("assets/") for targets in found.values() for target in targets)


# --- Cost -------------------------------------------------------------------------------------------------

MIB = 1024 * 1024


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("[" * MIB, id="brackets"),
        pytest.param("*" * MIB, id="stars"),
        pytest.param("_a " * (MIB // 3), id="underscores"),
        pytest.param(">" * MIB, id="quotes"),
        pytest.param("".join("  " * i + "- x\n" for i in range(1000)), id="nested-lists"),
        pytest.param("- " * (MIB // 2), id="list-markers"),
        pytest.param("|" + "a|" * 2000 + "\n|" + "-|" * 2000 + "\n" + ("|" + "b|" * 2000 + "\n") * 100, id="wide-table"),
        pytest.param("<div>" * (MIB // 5), id="unclosed-divs"),
        pytest.param("<div>" * 2000 + "\n\n" + "a\n\n" * (MIB // 30), id="divs-then-paragraphs"),
        pytest.param("<table>\n\n" + "a\n\n" * (MIB // 30), id="open-table-then-paragraphs"),
        pytest.param("<table>\n" + "&" * MIB, id="text-in-open-table"),
        pytest.param("| a |\n|---|\n| <col>" + "&" * MIB + " |", id="col-in-table-cell"),
        pytest.param("&" * MIB, id="ampersands"),
        pytest.param("<div>\n" + "\u00a9" * (MIB // 2), id="latin1-in-raw-html"),
        pytest.param('<img alt="' + "&" * MIB + '" src="x.png">', id="huge-attribute"),
        pytest.param("## a\n" * (MIB // 20), id="equal-headings"),
    ],
)
def test_pathological_inputs_finish(source):
    html = render_readme(source, repo=REPO)
    assert html
    assert_inert(html)


def test_oversized_input_is_cut():
    html = render_readme("a" * (2 * MIB), repo=REPO)
    assert 0 < html.count("a") <= readme.manifest.MAX_README_BYTES


def test_lone_surrogates_are_replaced():
    assert render_readme("a\ud800b", repo=REPO) == "<p>a?b</p>\n"


def test_raw_html_past_the_budget_is_shown_as_text():
    html = render_readme("<span>x</span>\n" * (readme.MAX_RAW_HTML_TAGS + 10), repo=REPO)
    assert html.count("<span>") == readme.MAX_RAW_HTML_TAGS
    assert "&lt;span&gt;" in html


def test_renderer_version_names_the_libraries():
    assert isinstance(readme.RENDERER_VERSION, str)
    assert "markdown-it-py-" in readme.RENDERER_VERSION and "nh3-" in readme.RENDERER_VERSION


def test_headings_can_start_below_the_pages_own():
    html = readme.render_readme("# A\n\n## B\n\n##### E\n\n<h1>raw</h1>\n\n`<h2>` and &lt;h3&gt;\n", repo=None,
                                top_heading=3)
    assert re.findall(r"</?h\d", html) == ["<h3", "</h3", "<h4", "</h4", "<h6", "</h6", "<h3", "</h3"]
    assert "<code>&lt;h2&gt;</code> and &lt;h3&gt;" in html  # text that looks like a tag stays text
    assert readme.render_readme("# A\n", repo=None) == '<h1 id="readme-a">A</h1>\n'
