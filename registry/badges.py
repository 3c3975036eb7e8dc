"""Status badges for READMEs: SVG in the look of shields.io, and shields.io's endpoint JSON.

Pure: facts in, SVG text or a dict out; no Django, no I/O. Like healthchecks' badges, a text is measured
with a table of the font's character widths (Verdana at 11px, as shields.io measures), so a given text
always gives the same width, and drawn from one SVG template.

Invariants: every text that reaches the SVG is cleaned of what XML cannot hold and escaped (a label is
chosen by whoever embeds the badge, a version by the environment's author); colors come only from
PALETTE, never from a caller's string; a badge always renders, grey "unknown" when there is nothing to say.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from xml.sax.saxutils import escape

# Verdana's advance widths in font units (2048 to the em), printable ASCII: the font shields.io measures.
_VERDANA_ADVANCE = {
    " ": 720, "!": 806, '"': 940, "#": 1676, "$": 1302, "%": 2204, "&": 1488, "'": 550, "(": 930, ")": 930,
    "*": 1302, "+": 1676, ",": 745, "-": 930, ".": 745, "/": 930, ":": 930, ";": 930, "<": 1676, "=": 1676,
    ">": 1676, "?": 1117, "@": 2048, "[": 930, "\\": 930, "]": 930, "^": 1676, "_": 1302, "`": 1302,
    "{": 1300, "|": 930, "}": 1300, "~": 1676,
    **dict.fromkeys("0123456789", 1302),
    "A": 1400, "B": 1404, "C": 1430, "D": 1578, "E": 1295, "F": 1177, "G": 1588, "H": 1539, "I": 862,
    "J": 931, "K": 1419, "L": 1140, "M": 1726, "N": 1532, "O": 1612, "P": 1235, "Q": 1612, "R": 1424,
    "S": 1400, "T": 1262, "U": 1499, "V": 1400, "W": 2025, "X": 1403, "Y": 1260, "Z": 1403,
    "a": 1230, "b": 1276, "c": 1067, "d": 1276, "e": 1220, "f": 720, "g": 1276, "h": 1296, "i": 562,
    "j": 705, "k": 1212, "l": 562, "m": 1992, "n": 1296, "o": 1243, "p": 1276, "q": 1276, "r": 874,
    "s": 1067, "t": 807, "u": 1296, "v": 1212, "w": 1676, "x": 1212, "y": 1212, "z": 1076,
}
_EM = 2048
FONT_SIZE = 11
# The table at 11px, in pixels.
VERDANA_11PX = {char: units * FONT_SIZE / _EM for char, units in _VERDANA_ADVANCE.items()}
# A character outside the table counts one em: as wide as the widest ASCII ('@') and as a CJK ideograph,
# so an unknown text is drawn a little loose rather than clipped.
DEFAULT_WIDTH_11PX = float(FONT_SIZE)
# Verdana Bold runs about an eighth wider than Verdana; the text is drawn with textLength, so a guess this
# close only changes the padding, never lets text overflow its box.
BOLD_SCALE = 1.125
FONT_FAMILY = "Verdana,Geneva,DejaVu Sans,sans-serif"

MAX_LABEL = 40
MAX_MESSAGE = 40


@dataclass(frozen=True)
class Color:
    """A palette entry: `fill` for the SVG; `endpoint` for shields' JSON, its own color name where it has one
    (so the badge shields.io draws matches ours), else the hex digits it also accepts."""

    fill: str
    endpoint: str


PALETTE = {
    "brightgreen": Color("#4c1", "brightgreen"),
    "yellow": Color("#dfb317", "yellow"),
    "red": Color("#e05d44", "red"),
    "blue": Color("#007ec6", "blue"),
    "orange": Color("#fe7d37", "orange"),
    "bluegrey": Color("#607d8b", "607d8b"),
    "lightgrey": Color("#9f9f9f", "lightgrey"),
    "grey": Color("#555", "grey"),
}
LABEL_COLOR = "grey"


@dataclass(frozen=True)
class Style:
    """How one of shields' styles draws a badge."""

    height: int
    font_size: int
    padding: int  # each side of each text
    radius: int
    gradient: bool  # the flat style's soft top light
    shadow: bool  # a dark copy of each text one pixel lower
    uppercase: bool
    letter_spacing: float
    bold_message: bool
    baseline: float


STYLES = {
    "flat": Style(height=20, font_size=11, padding=5, radius=3, gradient=True, shadow=True, uppercase=False,
                  letter_spacing=0.0, bold_message=False, baseline=14),
    "flat-square": Style(height=20, font_size=11, padding=5, radius=0, gradient=False, shadow=False,
                         uppercase=False, letter_spacing=0.0, bold_message=False, baseline=14),
    "for-the-badge": Style(height=28, font_size=10, padding=9, radius=0, gradient=False, shadow=False,
                           uppercase=True, letter_spacing=1.25, bold_message=True, baseline=17.5),
}
DEFAULT_STYLE = "flat"


def style_or_default(value: str | None) -> str:
    """A style name as asked for; anything else (absent, misspelt, hostile) is the default, never an error."""
    return value if value in STYLES else DEFAULT_STYLE


def _clean(text: str, limit: int) -> str:
    """Text an SVG can hold and a badge can show: white space folded to single spaces; control, format
    (bidirectional overrides, zero-width) and surrogate characters dropped (XML 1.0 cannot hold most of them,
    and the others would let a text display as something it is not); at most `limit` characters."""
    kept = "".join(" " if ch.isspace() else ch for ch in text
                   if unicodedata.category(ch) not in ("Cc", "Cf", "Cs") or ch.isspace())
    kept = " ".join(kept.replace("\ufffe", "").replace("\uffff", "").split())
    return kept if len(kept) <= limit else kept[:limit - 1].rstrip() + "…"


def custom_label(value: str | None) -> str:
    """A label someone chose (`?label=`), cleaned and cut to MAX_LABEL; "" when there is none to use."""
    return _clean(value or "", MAX_LABEL)


@dataclass(frozen=True)
class Badge:
    """What one badge says: a label on grey, then a message on a color of PALETTE."""

    label: str
    message: str
    color: str

    def __post_init__(self) -> None:
        if self.color not in PALETTE:
            raise ValueError(f"{self.color!r} is not a badge color (one of {', '.join(PALETTE)})")
        object.__setattr__(self, "label", _clean(self.label, MAX_LABEL))
        object.__setattr__(self, "message", _clean(self.message, MAX_MESSAGE))

    @property
    def title(self) -> str:
        """What the badge says, in words: its accessible name."""
        return f"{self.label}: {self.message}"


# --- what each badge says -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Subject:
    """What a badge describes: an environment's verdict and head revision, or one revision of it.

    `outcome` is pass | warn | fail | error, "" before any finished validation; `sleeping` says its Space is
    asleep (SLEEPING, PAUSED or STOPPED), asked only where the Space serves the revision described;
    `version` is the manifest's `version` as published (any JSON value); `sha` the revision's sha; `yanked`
    says its owners yanked the revision described, `deprecated` that they deprecated the environment.
    """

    outcome: str = ""
    sleeping: bool = False
    version: object = None
    sha: str = ""
    yanked: bool = False
    deprecated: bool = False


UNKNOWN = "unknown"
_VERDICTS = {"pass": ("passing", "brightgreen"), "warn": ("warning", "yellow"),
             "fail": ("failing", "red"), "error": ("failing", "red")}


def conformance_badge(subject: Subject | None, *, label: str = "") -> Badge:
    """The verdict: passing, warning, failing (fail or error); with no verdict, sleeping when the Space sleeps,
    else not validated; grey unknown when there is no such environment or revision. What its owners said comes
    first: a yanked revision is "yanked", a deprecated environment "deprecated", whatever the verdict."""
    label = label or "conformance"
    if subject is None:
        return Badge(label, UNKNOWN, "lightgrey")
    if subject.yanked:
        return Badge(label, "yanked", "orange")
    if subject.deprecated:
        return Badge(label, "deprecated", "orange")
    if subject.outcome in _VERDICTS:
        return Badge(label, *_VERDICTS[subject.outcome])
    if subject.sleeping:
        return Badge(label, "sleeping", "bluegrey")
    return Badge(label, "not validated", "lightgrey")


def version_badge(subject: Subject | None, *, label: str = "") -> Badge:
    """The manifest's version (a string or a number), else the first seven characters of the sha; grey unknown
    when there is no such environment or revision, or nothing to name it by. A yanked revision says so, in
    orange."""
    label = label or "version"
    version = subject.version if subject is not None else None
    if isinstance(version, (int, float)) and not isinstance(version, bool):
        version = str(version)
    room = MAX_MESSAGE - len(" (yanked)") if subject is not None and subject.yanked else MAX_MESSAGE
    if isinstance(version, str) and _clean(version, room):
        name = _clean(version, room)
    elif subject is not None and subject.sha:
        name = subject.sha[:7]
    else:
        return Badge(label, UNKNOWN, "lightgrey")
    return Badge(label, f"{name} (yanked)", "orange") if subject.yanked else Badge(label, name, "blue")


@dataclass(frozen=True)
class Score:
    """An evaluation result a score badge shows: whose, its mean reward and its 95% interval (None: one episode)."""

    agent: str
    mean: float
    ci_low: float | None = None
    ci_high: float | None = None


def _num(value: float) -> str:
    return f"{value:.3g}"


def score_badge(score: Score | None, *, label: str = "") -> Badge:
    """The mean reward ± half its 95% interval and the agent ("0.62 ±0.05 random"); "no results" in grey."""
    label = label or "score"
    if score is None:
        return Badge(label, "no results", "lightgrey")
    text = _num(score.mean)
    if score.ci_low is not None and score.ci_high is not None and score.ci_high > score.ci_low:
        text += f" ±{_num((score.ci_high - score.ci_low) / 2)}"
    return Badge(label, f"{text} {score.agent}", "blue")


# Every badge by name, in the order a page shows them.
BADGES: dict[str, Callable[..., Badge]] = {"conformance": conformance_badge, "version": version_badge}


# --- drawing --------------------------------------------------------------------------------------------------


def text_width(text: str, *, font_size: int = FONT_SIZE, bold: bool = False) -> float:
    """The width in pixels of `text` in Verdana at `font_size`, character by character (no kerning), so that
    a given text always measures the same and a longer one never measures less."""
    width = sum(VERDANA_11PX.get(ch, DEFAULT_WIDTH_11PX) for ch in text) * font_size / FONT_SIZE
    return width * BOLD_SCALE if bold else width


def _attr(text: str) -> str:
    return escape(text, {'"': "&quot;", "'": "&apos;"})


_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" aria-label="{title}">'
    "<title>{title}</title>{defs}"
    '<g{clip}{crisp}><rect width="{label_width}" height="{height}" fill="{label_fill}"/>'
    '<rect x="{label_width}" width="{message_width}" height="{height}" fill="{fill}"/>{light}</g>'
    '<g fill="#fff" text-anchor="middle" font-family="{font}" text-rendering="geometricPrecision" '
    'font-size="{font_size}">{texts}</g></svg>'
)
_GRADIENT = ('<linearGradient id="s" x2="0" y2="100%"><stop offset="0" stop-color="#bbb" stop-opacity=".1"/>'
             '<stop offset="1" stop-opacity=".1"/></linearGradient>')
# Named by its size: two badges inlined in one page may then share an id only where the shapes are equal.
_ROUND = ('<clipPath id="r{width}-{height}"><rect width="{width}" height="{height}" rx="{radius}" fill="#fff"/>'
          "</clipPath>")
_TEXT = '<text{extra} x="{x:.2f}" y="{y:g}" textLength="{length:.2f}"{spacing}{weight}>{text}</text>'


def _texts(text: str, *, left: int, box: int, style: Style, bold: bool) -> str:
    """One text centred in its box, with its shadow in the flat style. textLength holds the drawn text to the
    measured width whatever font the reader has; letter spacing also follows the last character, so the
    centre moves right by half of it to keep the letters themselves centred."""
    length = text_width(text, font_size=style.font_size, bold=bold) + style.letter_spacing * len(text)
    common = {"x": left + box / 2 + style.letter_spacing / 2, "length": length, "text": escape(text),
              "spacing": f' letter-spacing="{style.letter_spacing:g}"' if style.letter_spacing else "",
              "weight": ' font-weight="bold"' if bold else ""}
    shadow = (_TEXT.format(extra=' aria-hidden="true" fill="#010101" fill-opacity=".3"', y=style.baseline + 1,
                           **common) if style.shadow else "")
    return shadow + _TEXT.format(extra="", y=style.baseline, **common)


def badge_svg(badge: Badge, *, style: str = DEFAULT_STYLE) -> str:
    """The badge as an SVG document: `role="img"`, its words as `aria-label` and `<title>`."""
    look = STYLES[style_or_default(style)]
    label = badge.label.upper() if look.uppercase else badge.label
    message = badge.message.upper() if look.uppercase else badge.message

    def box(text: str, bold: bool) -> int:
        return math.ceil(text_width(text, font_size=look.font_size, bold=bold)
                         + look.letter_spacing * len(text)) + 2 * look.padding

    label_width, message_width = box(label, False), box(message, look.bold_message)
    width = label_width + message_width
    rounded = look.radius > 0
    return _SVG.format(
        width=width, height=look.height, title=_attr(badge.title), label_width=label_width,
        message_width=message_width, label_fill=PALETTE[LABEL_COLOR].fill, fill=PALETTE[badge.color].fill,
        defs=(_GRADIENT if look.gradient else "")
        + (_ROUND.format(width=width, height=look.height, radius=look.radius) if rounded else ""),
        clip=f' clip-path="url(#r{width}-{look.height})"' if rounded else "",
        crisp="" if rounded else ' shape-rendering="crispEdges"',
        light=f'<rect width="{width}" height="{look.height}" fill="url(#s)"/>' if look.gradient else "",
        font=FONT_FAMILY, font_size=look.font_size,
        texts=_texts(label, left=0, box=label_width, style=look, bold=False)
        + _texts(message, left=label_width, box=message_width, style=look, bold=look.bold_message),
    )


def badge_endpoint(badge: Badge, *, style: str = DEFAULT_STYLE) -> dict:
    """The badge in shields.io's endpoint shape (https://shields.io/badges/endpoint-badge), for
    `img.shields.io/endpoint?url=…`; `style` is named only when it is not shields' default."""
    shape = {"schemaVersion": 1, "label": badge.label, "message": badge.message,
             "color": PALETTE[badge.color].endpoint, "labelColor": PALETTE[LABEL_COLOR].endpoint}
    style = style_or_default(style)
    if style != DEFAULT_STYLE:
        shape["style"] = style
    return shape


# --- embedding ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Embed:
    """One way to embed a badge: `text` is what to copy. Shaped like a pull form, so the page shows both
    with the same copy block."""

    kind: str  # markdown | html
    label: str
    text: str
    note: str = ""


def _markdown_text(text: str) -> str:
    return "".join("\\" + ch if ch in "\\[]" else ch for ch in text)


def _markdown_url(url: str) -> str:
    # A parenthesis or a space would end a Markdown link target early.
    return url.replace(" ", "%20").replace("(", "%28").replace(")", "%29")


def badge_embeds(*, image_url: str, link_url: str, alt: str, title: str) -> list[Embed]:
    """The Markdown and HTML that show the badge at `image_url`, linked to `link_url`; `title` names the badge
    in the copy labels ("conformance")."""
    html_alt, html_link, html_image = _attr(alt), _attr(link_url), _attr(image_url)
    return [
        Embed("markdown", f"Markdown for the {title} badge",
              f"[![{_markdown_text(alt)}]({_markdown_url(image_url)})]({_markdown_url(link_url)})"),
        Embed("html", f"HTML for the {title} badge",
              f'<a href="{html_link}"><img src="{html_image}" alt="{html_alt}"></a>'),
    ]
