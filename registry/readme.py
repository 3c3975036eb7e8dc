"""README Markdown to safe HTML for the catalog page, and to plain text for search.

Pure: no Django, no I/O. A README is written by a stranger, up to 1 MiB of it.
markdown-it-py parses it (CommonMark, GFM tables and strikethrough, raw HTML
let through) and nh3 (ammonia) then sanitizes the result against an allow-list,
so the invariant rests on the sanitizer alone, whatever the parser emits:

* only the tags and attributes in `_TAGS` / `_ATTRIBUTES` survive, and every
  URL left is http, https or mailto, or an in-page `#readme-…` fragment;
* relative URLs point at the Space's files at the revision's commit, or are
  dropped when there is no Hub to point at (a local source);
* heading ids are prefixed with `readme-` so a README cannot shadow the page's;
* the cost is linear in the input, where the HTML5 tree builder alone would not
  be: see `_raw_html`, `_DISGUISED` and `_bound_runs`.

Callers cache the HTML beside `RENDERER_VERSION` and re-render when it changes.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import quote, unquote

import markdown_it
import nh3
from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from markdown_it.token import Token

from registry import manifest

__all__ = ["RENDERER_VERSION", "RepoRef", "render_readme", "readme_text"]

# Bump the leading number whenever our code renders the same README differently (allow-list, URL policy, ids);
# the libraries' versions are part of it because an upgrade of either can change the HTML too.
RENDERER_VERSION = f"2/markdown-it-py-{markdown_it.__version__}/nh3-{nh3.__version__}"

HUB_ENDPOINT = "https://huggingface.co"
ID_PREFIX = "readme-"
URL_SCHEMES = {"http", "https", "mailto"}


@dataclass(frozen=True)
class RepoRef:
    """The Space a README belongs to, at the commit it was read from: where its relative links lead."""

    owner: str
    name: str
    sha: str
    endpoint: str = HUB_ENDPOINT


def render_readme(markdown: str, *, repo: RepoRef | None, top_heading: int = 1) -> str:
    """Safe HTML for a README body; `repo=None` (a local source) drops relative links' targets and relative images.

    `top_heading` is the level a README's `# heading` takes (a page that shows the README under its own `<h2>`
    passes 3); deeper ones follow, none beyond `<h6>`."""
    html = _render(markdown, repo)
    if top_heading == 1:
        return html
    # Sanitized HTML: every `<h1`…`</h6>` left is a heading tag (text holds `&lt;`, attributes cannot hold `<`).
    return _HEADING_TAG.sub(lambda m: f"<{m[1]}h{min(6, int(m[2]) + top_heading - 1)}", html)


_HEADING_TAG = re.compile(r"<(/?)h([1-6])(?=[\s>])")


def readme_text(markdown: str, *, limit: int) -> str:
    """The README's words for full-text search: no markup, no URLs or image alt text, no code blocks (inline code
    stays), whitespace collapsed, at most `limit` characters cut at a word boundary."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    extractor = _TextExtractor()
    extractor.feed(_render(markdown, None))
    extractor.close()
    return manifest.shorten("".join(extractor.parts), limit)


# --- Parsing ------------------------------------------------------------------------------------------

# Raw HTML start tags honoured per README; past this the rest is shown as text. HTML5 tree building costs
# time proportional to the depth of open elements for every block element (the "p in button scope" check),
# so a million unclosed `<div>`s would be quadratic; capped, the depth is a constant factor.
MAX_RAW_HTML_TAGS = 2000
_RAW_TAG = re.compile(r"<[A-Za-z]")
MAX_SLUG_CHARS = 80
# `maxNesting` bounds blockquote/list/emphasis recursion: deeper input is rendered as text, not recursed into.
MAX_NESTING = 20


def _shape(state: StateCore) -> None:
    """One pass over the tokens: heading ids, table alignment as `align`, `<del>` for strikethrough, raw HTML budget."""
    slugs: dict[str, int] = {}
    raw_tags = 0
    tokens = state.tokens
    for index, token in enumerate(tokens):
        if token.type == "heading_open" and index + 1 < len(tokens):
            token.attrSet("id", _unique(_slug(tokens[index + 1].children or []), slugs))
        elif token.type in ("th_open", "td_open"):
            # markdown-it writes alignment as a style attribute; styles never pass the sanitizer, `align` does.
            style = str(token.attrGet("style") or "")
            token.attrs.pop("style", None)
            if style.startswith("text-align:"):
                token.attrSet("align", style.removeprefix("text-align:"))
        elif token.type == "html_block":
            raw_tags = _raw_html(token, raw_tags)
        elif token.type == "inline":
            for child in token.children or []:
                if child.type == "html_inline":
                    raw_tags = _raw_html(child, raw_tags)
                elif child.type in ("s_open", "s_close"):
                    child.tag = "del"


def _raw_html(token: Token, used: int) -> int:
    """Count the token's start tags against MAX_RAW_HTML_TAGS (once over, the token renders as escaped text) and
    disguise its table and formatting tags (see `_DISGUISED`)."""
    used += len(_RAW_TAG.findall(token.content))
    if used > MAX_RAW_HTML_TAGS:
        token.type = "text"
    else:
        token.content = _RAW_DISGUISED_TAG.sub(rf"<\1{_DISGUISE}\2", token.content)
    return used


def _slug(children: Sequence[Token]) -> str:
    """GitHub's anchor rule: the heading's text, lower-cased, punctuation and emoji dropped, spaces as hyphens."""
    text = "".join(child.content for child in children if child.type in ("text", "code_inline"))
    kept = []
    for char in text.lower()[: MAX_SLUG_CHARS * 4]:
        if char in " -":
            kept.append("-")
        elif char == "_" or _is_word_char(char):
            kept.append(char)
    return "".join(kept)[:MAX_SLUG_CHARS] or "section"


def _is_word_char(char: str) -> bool:
    # Letters, digits and the combining marks some scripts spell with; not the variation selector that follows
    # an emoji ("👁️ Observations" is linked as #-observations in the wild).
    category = unicodedata.category(char)
    if category in ("Mn", "Mc"):
        return not ("\ufe00" <= char <= "\ufe0f" or "\U000e0100" <= char <= "\U000e01ef")
    return category[0] in "LN"


def _unique(slug: str, seen: dict[str, int]) -> str:
    """The slug with -1, -2… appended to repeats, as GitHub does (the sanitizer adds the `readme-` prefix).

    `seen` maps every id given out to the next suffix to try for it, so a thousand "Example" headings cost a
    thousand steps, not half a million.
    """
    candidate, n = slug, seen.get(slug, 0)
    if n:
        candidate = f"{slug}-{n}"
    while candidate in seen:
        n += 1
        candidate = f"{slug}-{n}"
    seen[slug] = n + 1
    seen.setdefault(candidate, 1)
    return candidate


_MD = MarkdownIt("commonmark", {"maxNesting": MAX_NESTING, "html": True}).enable(["table", "strikethrough"])
_MD.core.ruler.push("readme_shape", _shape)


# --- Sanitizing ---------------------------------------------------------------------------------------

_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
_TAGS = {
    *_HEADINGS, "p", "br", "hr", "blockquote", "ul", "ol", "li", "a", "img", "code", "pre", "kbd",
    "em", "strong", "del", "sup", "sub", "table", "thead", "tbody", "tr", "th", "td",
    "details", "summary", "div", "span",
}
_ATTRIBUTES = {
    "*": set(),  # not even ammonia's default lang and title
    **{h: {"id"} for h in _HEADINGS},
    "a": {"href", "title"},
    "img": {"src", "alt", "title", "width", "height"},
    "code": {"class"},
    "ol": {"start"},
    "details": {"open"},
}
_ALIGN = {"left", "center", "right"}
_ALIGNED = {"th", "td", "p", "div", "img", *_HEADINGS}
_LINK_REL = "nofollow noopener noreferrer"
_SET_ATTRIBUTES = {"img": {"loading": "lazy", "referrerpolicy": "no-referrer"}}
# Elements whose content is not prose: dropped whole rather than shown as stray text.
_CLEAN_CONTENT = {
    "script", "style", "iframe", "object", "noscript", "template", "textarea", "title", "xmp",
    "noembed", "noframes", "plaintext", "svg", "math", "select",
}
_LANGUAGE_CLASS = re.compile(r"language-[A-Za-z0-9_+#.-]{1,40}")

# Table and formatting tags written as raw HTML reach the sanitizer disguised as unknown elements and get their
# names back after it, because the HTML5 tree builder treats them specially at a cost the input controls:
# - in a table mode every stray node is "foster parented" in front of the table, at a cost that grows with the
#   table's siblings: a `<table>` left open above a megabyte of paragraphs, or a `<col>` in a markdown table
#   cell before a megabyte of text, is quadratic;
# - open formatting elements are re-created in every block that follows the one that closed them: a thousand
#   `<em title=…>` before a thousand `<div>`s makes a million elements out of 30 KB.
# Disguised, they nest like a <span>. Markdown's own tables and emphasis are always well formed and keep their
# names. Renaming back is safe because the output holds no element whose content a browser tokenizes
# differently (no script, style, textarea, svg, comments): a browser rebuilding the tree only moves sanitized
# nodes around.
_DISGUISED = (
    "table", "caption", "colgroup", "col", "thead", "tbody", "tfoot", "tr", "th", "td",
    "a", "b", "big", "code", "em", "font", "i", "nobr", "s", "small", "strike", "strong", "tt", "u",
)
_DISGUISE = "openenv-raw-"  # unlikely enough in a README's own text, where it is renamed back as well
_RAW_DISGUISED_TAG = re.compile(rf"<(/?)({'|'.join(_DISGUISED)})(?=[\s/>]|$)", re.IGNORECASE)
# Also in escaped text, where a raw attribute value like title="<table>" was renamed too.
_DISGUISED_TAG = re.compile(rf"(<|&lt;)(/?){_DISGUISE}({'|'.join(_DISGUISED)})\b")


def _disguised(allowed: dict) -> dict:
    """An allow-list entry keyed by tag, extended to the disguised names of the tags it covers."""
    return {**allowed, **{_DISGUISE + tag: value for tag, value in allowed.items() if tag in _DISGUISED}}


def _attribute_filter(tag: str, attribute: str, value: str) -> str | None:
    """Every id gets the `readme-` prefix, as every `#fragment` link does, whether markdown or the README's own HTML
    wrote it; `<code>` keeps only `language-*` classes (a syntax highlighter's hook, nothing to style the page with).
    """
    if attribute == "id":
        return ID_PREFIX + value
    if tag.removeprefix(_DISGUISE) == "code" and attribute == "class":
        kept = [name for name in value.split() if _LANGUAGE_CLASS.fullmatch(name)]
        return " ".join(kept) or None
    return value


_CLEANER = dict(
    tags=_TAGS | {_DISGUISE + tag for tag in _TAGS.intersection(_DISGUISED)},
    clean_content_tags=_CLEAN_CONTENT,
    attributes=_disguised(_ATTRIBUTES),
    tag_attribute_values=_disguised({tag: {"align": _ALIGN} for tag in _ALIGNED}),
    attribute_filter=_attribute_filter,
    url_schemes=URL_SCHEMES,
    link_rel=_LINK_REL,
    # link_rel only knows <a> by its real name.
    set_tag_attribute_values={**_SET_ATTRIBUTES, _DISGUISE + "a": {"rel": _LINK_REL}},
)


def _render(markdown: str, repo: RepoRef | None) -> str:
    """Cap, strip front-matter, parse, bound, sanitize, then restore disguised names and drop sourceless images."""
    # The index stores at most MAX_README_BYTES; anything longer is a caller's mistake, cut rather than paid for.
    # Lone surrogates cannot cross into Rust; a strict UTF-8 decode leaves none, but a str may hold them.
    markdown = markdown[: manifest.MAX_README_BYTES].encode("utf-8", "replace").decode("utf-8")
    _, body = manifest.split_front_matter(markdown)
    html = _bound_runs(_MD.render(body, {}))
    html = nh3.clean(html, url_relative=lambda url: _relative_url(url, repo), **_CLEANER)
    return _DISGUISED_TAG.sub(r"\1\2\3", _drop_sourceless_images(html))


# Text runs longer than this are split by empty comments (which the sanitizer drops): ammonia's cost grows with
# the square of a text node's length when it holds `&` or U+0080–U+00BF, so nodes are kept short.
TEXT_CHUNK_CHARS = 512
# A tag longer than this (a megabyte of alt text or title) is shown as text: attribute values cost the same way.
MAX_TAG_CHARS = 8192
_RUN = re.compile(r"(<[^<>]*)|[^<>]+")


def _bound_runs(html: str) -> str:
    """Split long text runs and neutralize huge tags so that sanitizing stays linear; the result renders the same."""

    def bound(match: re.Match) -> str:
        run = match.group()
        if match.group(1) is not None:
            if len(run) <= MAX_TAG_CHARS:
                return run
            run = "&lt;" + run[1:]
        if len(run) <= TEXT_CHUNK_CHARS:
            return run
        return "<!---->".join(_chunks(run))

    return _RUN.sub(bound, html)


def _chunks(run: str) -> Iterator[str]:
    """TEXT_CHUNK_CHARS-sized pieces of a text run, never cutting a character reference (`&amp;`, `&#38;`) in two."""
    start = 0
    while len(run) - start > TEXT_CHUNK_CHARS:
        cut = start + TEXT_CHUNK_CHARS
        amp = run.rfind("&", cut - 40, cut)  # no character reference is longer than 40 characters
        if amp > start and ";" not in run[amp:cut]:
            cut = amp
        yield run[start:cut]
        start = cut
    yield run[start:]


# ammonia serializes every attribute double-quoted with `"` escaped, so this walks an <img> tag exactly.
_IMG = re.compile(r'<img((?:\s+[^\s=>]+(?:="[^"]*")?)*)\s*/?>')


def _drop_sourceless_images(html: str) -> str:
    """An <img> whose src was refused (bad scheme, or relative with no Hub) would only show a broken icon."""
    return _IMG.sub(lambda m: m.group() if re.search(r'\ssrc="', m.group(1)) else "", html)


# --- URLs -----------------------------------------------------------------------------------------------

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
# Browsers ignore these around a URL and drop tabs and newlines inside it (the WHATWG URL parser).
_URL_TRIM = "".join(map(chr, range(0x21)))
_PCHAR_SAFE = "!$&'()*+,;=:@~"
_QUERY_SAFE = _PCHAR_SAFE + "/?%"


def _relative_url(url: str, repo: RepoRef | None) -> str | None:
    """Where a relative href/src leads: a `#readme-` fragment, the Space's file at the commit, or nowhere."""
    url = url.strip(_URL_TRIM).replace("\t", "").replace("\n", "").replace("\r", "")
    if url.startswith("#"):
        fragment = quote(url[1:], safe=_QUERY_SAFE)
        return "#" + ID_PREFIX + fragment
    if url.startswith("//"):
        return "https:" + quote(url, safe=_QUERY_SAFE + "#")  # scheme-relative: on our https page, https
    if repo is None or _SCHEME.match(url):
        return None  # the sanitizer saw no scheme here; if one appears after trimming, refuse rather than guess
    url, _, fragment = url.partition("#")
    path, _, query = url.partition("?")
    segments: list[str] = []
    for segment in path.split("/"):
        segment = unquote(segment)
        if segment == "..":
            if segments:
                segments.pop()  # and at the root it stays there: nothing outside the repository
        elif segment not in ("", "."):
            segments.append(quote(segment, safe=_PCHAR_SAFE))
    if segments and path.endswith("/"):
        segments.append("")
    target = (
        f"{repo.endpoint.rstrip('/')}/spaces/{quote(repo.owner, safe='')}/{quote(repo.name, safe='')}"
        f"/resolve/{quote(repo.sha, safe='')}/" + "/".join(segments)
    )
    if query:
        target += "?" + quote(query, safe=_QUERY_SAFE)
    if fragment:
        target += "#" + quote(fragment, safe=_QUERY_SAFE)
    return target


# --- Text ---------------------------------------------------------------------------------------------

_BLOCKS = {
    *_HEADINGS, "p", "br", "hr", "blockquote", "ul", "ol", "li", "pre", "table", "thead", "tbody", "tr", "th",
    "td", "details", "summary", "div",
}


class _TextExtractor(HTMLParser):
    """The words of sanitized HTML: a space at every block boundary, nothing from inside <pre>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._in_pre = 0

    def handle_starttag(self, tag, attrs):
        if tag == "pre":
            self._in_pre += 1
        if tag in _BLOCKS:
            self.parts.append(" ")

    def handle_endtag(self, tag):
        if tag == "pre":
            self._in_pre = max(0, self._in_pre - 1)
        if tag in _BLOCKS:
            self.parts.append(" ")

    def handle_data(self, data):
        if not self._in_pre:
            self.parts.append(data)
