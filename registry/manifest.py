"""Reading what an environment package says about itself: openenv.yaml, README.md, pyproject.toml.

Pure functions, no I/O and no database. Everything read here came from
someone else's repository: it is capped in size, decoded strictly, parsed with
a YAML loader that refuses aliases (billion-laughs) and never executes
anything. Each problem found becomes a `Problem` with a stable code and a
message meant for the environment's author.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from registry import pyproject

MANIFEST_FILE = "openenv.yaml"
README_FILE = "README.md"
PYPROJECT_FILE = pyproject.FILE

# Size caps: generous for real packages (the largest corpus README is ~30 KiB), small enough to be harmless.
MAX_MANIFEST_BYTES = 256 * 1024
MAX_README_BYTES = 1024 * 1024
MAX_PYPROJECT_BYTES = pyproject.MAX_BYTES
MAX_NAME_LENGTH = 200
MAX_DESCRIPTION_LENGTH = 300
MAX_YAML_DEPTH = 64

# The files the index reads from each package; everything else is only listed.
PACKAGE_FILES = (MANIFEST_FILE, README_FILE, PYPROJECT_FILE)
FILE_CAPS = {MANIFEST_FILE: MAX_MANIFEST_BYTES, README_FILE: MAX_README_BYTES, PYPROJECT_FILE: MAX_PYPROJECT_BYTES}

OPENENV_DISTRIBUTIONS = {"openenv", "openenv-core"}
# The manifest's `app` when it names none: what `openenv init` scaffolds and Spaces serve.
DEFAULT_APP = "server.app:app"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with what was read; `code` is stable, `message` is for people."""

    code: str
    message: str
    transient: bool = False


@dataclass
class PackageFacts:
    """Everything the index keeps from one environment package at one revision."""

    manifest_raw: str = ""
    manifest: dict[str, Any] | None = None
    manifest_name: str = ""
    readme_raw: str = ""
    readme_front_matter: dict[str, Any] | None = None
    readme_body: str = ""
    description: str = ""
    package_name: str = ""
    openenv_requirement: str = ""
    tags: list[str] = field(default_factory=list)
    content_digest: str = ""
    problems: list[Problem] = field(default_factory=list)


class _NoAliasLoader(yaml.SafeLoader):
    """SafeLoader that refuses anchors/aliases and deep nesting: both exist only to blow up memory or stack."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*name) are not accepted in environment metadata", event.start_mark
            )
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nesting deeper than {MAX_YAML_DEPTH} levels", self.peek_event().start_mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node, deep=False):
        # Valid YAML can hold values Python refuses (`2024-02-30`, a 5000-digit integer): say which and where.
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError, TypeError) as exc:
            what = f"the value {node.value[:40]!r}" if isinstance(node.value, str) else "a value"
            raise yaml.constructor.ConstructorError(
                None, None, f"{what} cannot be read ({' '.join(str(exc).split())[:120]})", node.start_mark
            ) from None


class YamlError(ValueError):
    pass


def load_yaml(text: str) -> Any:
    """Parse untrusted YAML safely; raise YamlError with a readable reason."""
    try:
        return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - _NoAliasLoader is a SafeLoader
    except yaml.YAMLError as exc:
        raise YamlError(" ".join(str(exc).split())) from None
    except (RecursionError, MemoryError):
        raise YamlError("the document is nested too deeply to read") from None


def decode_text(raw: bytes, *, filename: str, cap: int) -> tuple[str | None, Problem | None]:
    """Decode a capped UTF-8 file; a BOM is tolerated, anything else invalid is a problem."""
    if len(raw) > cap:  # readers stop one byte past the cap, so the true size is unknown
        return None, Problem(
            f"{_slug(filename)}.too_large", f"{filename} is larger than {cap:,} bytes, the most the index reads."
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return None, Problem(
            f"{_slug(filename)}.not_utf8",
            f"{filename} is not valid UTF-8 (byte {exc.start}: {raw[exc.start:exc.start + 1]!r}).",
        )
    if "\x00" in text:
        return None, Problem(f"{_slug(filename)}.binary", f"{filename} contains NUL bytes; it is not a text file.")
    return text, None


def _slug(filename: str) -> str:
    return {MANIFEST_FILE: "manifest", README_FILE: "readme", PYPROJECT_FILE: "pyproject"}.get(filename, "file")


def _json_safe(value: Any) -> Any:
    """YAML can produce dates, sets and non-string keys; JSON storage needs plain data."""
    if isinstance(value, dict):
        return {str(k).replace("\x00", ""): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_json_safe(v) for v in value]
    if isinstance(value, str):
        return value.replace("\x00", "")  # escapes like "\0" parse to NUL, which PostgreSQL text cannot hold
    if value is None or isinstance(value, (bool, int, float)):
        if isinstance(value, float) and value != value:  # NaN is not JSON
            return None
        return value
    return str(value)


def parse_manifest(raw: bytes) -> tuple[str, dict[str, Any] | None, list[Problem]]:
    """Read openenv.yaml: returns (text, mapping or None, problems). A usable manifest is a mapping with a name."""
    text, problem = decode_text(raw, filename=MANIFEST_FILE, cap=MAX_MANIFEST_BYTES)
    if problem:
        return "", None, [problem]
    try:
        data = load_yaml(text)
    except YamlError as exc:
        return text, None, [Problem("manifest.yaml_invalid", f"openenv.yaml is not valid YAML: {exc}")]
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        return text, None, [Problem("manifest.not_mapping", f"openenv.yaml must be a mapping of keys to values; it is {kind}.")]
    data = _json_safe(data)
    problems: list[Problem] = []
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        problems.append(Problem("manifest.name_missing", "openenv.yaml has no `name`; every OpenEnv tool requires one."))
    elif len(name) > MAX_NAME_LENGTH:
        problems.append(Problem("manifest.name_too_long", f"openenv.yaml `name` is longer than {MAX_NAME_LENGTH} characters."))
    return text, data, problems


_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)(?:\r?\n)?^---[ \t]*$\r?\n?", re.DOTALL | re.MULTILINE)


def split_front_matter(text: str) -> tuple[str | None, str]:
    """(front-matter YAML or None, body) of a README: a `---` first line up to the next `---` line, as the Hub reads it."""
    match = _FRONT_MATTER.match(text)
    if not match:
        return None, text
    return match.group(1), text[match.end():]


def parse_readme(raw: bytes) -> tuple[str, dict[str, Any] | None, str, list[Problem]]:
    """Split README.md into (text, front-matter mapping or None, body, problems), the way the Hub reads it."""
    text, problem = decode_text(raw, filename=README_FILE, cap=MAX_README_BYTES)
    if problem:
        return "", None, "", [problem]
    front_matter, body = split_front_matter(text)
    if front_matter is None:
        return text, None, text, []
    try:
        data = load_yaml(front_matter)
    except YamlError as exc:
        return text, None, body, [Problem("readme.front_matter_invalid", f"README.md front-matter is not valid YAML: {exc}")]
    if data is None:
        return text, {}, body, []
    if not isinstance(data, dict):
        return text, None, body, [Problem("readme.front_matter_invalid", "README.md front-matter must be a mapping.")]
    return text, _json_safe(data), body, []


def parse_pyproject(raw: bytes) -> tuple[str, str, list[Problem]]:
    """Read pyproject.toml: returns (project name, the openenv/openenv-core requirement, problems)."""
    text, problem = decode_text(raw, filename=PYPROJECT_FILE, cap=MAX_PYPROJECT_BYTES)
    if problem:
        return "", "", [problem]
    try:
        project = pyproject.parse(text)
    except pyproject.PyProjectError as exc:
        return "", "", [Problem("pyproject.toml_invalid", str(exc))]
    if not project.has_project:
        return "", "", [Problem("pyproject.no_project", "pyproject.toml has no [project] table.")]
    requirement = next((dep for dep in project.dependencies or ()
                        if pyproject.requirement_name(dep) in OPENENV_DISTRIBUTIONS), "")
    name = project.name.replace("\x00", "")
    return name[:MAX_NAME_LENGTH], " ".join(requirement.split())[:MAX_NAME_LENGTH], []


_SKIP_LINE = re.compile(r"^\s*(#|!\[|\[!\[|<|```|\||>|-{3,}|={3,}|\*{3,})")
# Brackets exclude their own kind so that a run of unclosed `[` or `(` costs linear time, not quadratic.
_MARKUP = re.compile(r"(\*\*|__|`|\[([^\[\]]*)\]\([^()]*\))")
# The description is cut to MAX_DESCRIPTION_LENGTH anyway: never run markup removal on more than this.
MAX_PARAGRAPH_CHARS = 4 * 1024


def first_paragraph(body: str) -> str:
    """The first prose paragraph of a Markdown body, without markup: a description of last resort."""
    para: list[str] = []
    in_code = False
    for line in body.splitlines():
        if line.strip().startswith("```"):
            in_code = not in_code
            if para:
                break
            continue
        if in_code:
            continue
        if not line.strip():
            if para:
                break
            continue
        if _SKIP_LINE.match(line):
            if para:
                break
            continue
        para.append(line.strip())
    text = " ".join(para)[:MAX_PARAGRAPH_CHARS]
    text = _MARKUP.sub(lambda m: m.group(2) if m.group(2) is not None else "", text)
    return text


def shorten(text: str, limit: int = MAX_DESCRIPTION_LENGTH) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return text[: limit - 1].rsplit(" ", 1)[0] + "…"


def describe(manifest: dict | None, front_matter: dict | None, body: str) -> str:
    """Description shown in the catalog: the manifest's, else the Space card's, else the README's first paragraph."""
    for source, key in ((manifest, "description"), (front_matter, "short_description")):
        if source and isinstance(source.get(key), str) and source[key].strip():
            return shorten(source[key])
    paragraph = first_paragraph(body)
    if paragraph:
        return shorten(paragraph)
    if front_matter and isinstance(front_matter.get("title"), str):
        return shorten(front_matter["title"])
    return ""


def card_tags(front_matter: dict | None) -> list[str]:
    """Tags declared in README front-matter (what the Hub turns into Space tags)."""
    tags = (front_matter or {}).get("tags")
    if isinstance(tags, str):
        tags = [tags]
    if not isinstance(tags, list):
        return []
    return [str(t)[:100] for t in tags if isinstance(t, (str, int, float)) and str(t).strip()][:50]


def content_digest(files: dict[str, bytes]) -> str:
    """sha256 over (path, length, bytes) of each file, in path order: equal digests mean equal files."""
    h = hashlib.sha256()
    for path in sorted(files):
        data = files[path]
        h.update(path.encode() + b"\0" + str(len(data)).encode() + b"\0")
        h.update(data)
    return h.hexdigest()


def read_package(files: dict[str, bytes | None]) -> PackageFacts:
    """Parse the three metadata files of a package (None = absent) into PackageFacts, collecting every problem."""
    facts = PackageFacts()
    present = {path: data for path, data in files.items() if data is not None}
    facts.content_digest = content_digest(present)

    manifest_raw = files.get(MANIFEST_FILE)
    if manifest_raw is None:
        facts.problems.append(
            Problem("manifest.missing", "There is no openenv.yaml at the root of the repository; it is not an OpenEnv environment package.")
        )
    else:
        facts.manifest_raw, facts.manifest, problems = parse_manifest(manifest_raw)
        facts.problems += problems
        if facts.manifest and isinstance(facts.manifest.get("name"), str):
            facts.manifest_name = facts.manifest["name"].strip()[:MAX_NAME_LENGTH]

    readme_raw = files.get(README_FILE)
    if readme_raw is not None:
        facts.readme_raw, facts.readme_front_matter, facts.readme_body, problems = parse_readme(readme_raw)
        facts.problems += problems

    pyproject_raw = files.get(PYPROJECT_FILE)
    if pyproject_raw is not None:
        facts.package_name, facts.openenv_requirement, problems = parse_pyproject(pyproject_raw)
        facts.problems += problems

    facts.description = describe(facts.manifest, facts.readme_front_matter, facts.readme_body)
    facts.tags = card_tags(facts.readme_front_matter)
    return facts


def subdomain_for(repo_id: str) -> str:
    """The Space subdomain as OpenEnv derives it: lowercased, every [^a-z0-9] turned into '-'."""
    return re.sub(r"[^a-z0-9]", "-", repo_id.lower())
