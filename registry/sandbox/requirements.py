"""The requirement policy: what a package may ask pip to install.

Only plain requirements on named distributions from the configured index:
a name, extras, version specifiers and an environment marker, as `packaging`
(pip's own parser) reads them. Direct references, URLs, paths, archives and
pip options are refused, so installing reaches nothing the operator did not
choose. The package's own files are read through `registry.pyproject`, the
same reader the indexer uses.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from registry import pyproject

from .config import RequirementsError, clip

MAX_REQUIREMENTS = 200
MAX_REQUIREMENT_LENGTH = 500
MAX_REQUIREMENTS_TXT_BYTES = 64 * 1024
REQUIREMENTS_TXT_PATHS = ("requirements.txt", "server/requirements.txt")

# pip treats an argument ending like an archive as a file path, not as a distribution name.
_ARCHIVE_SUFFIXES = (".whl", ".zip", ".tar", ".tgz", ".tbz", ".txz", ".tlz", ".gz", ".bz2", ".xz", ".lz", ".lzma")


def normalize_requirement(text: str) -> str:
    """One PEP 508 requirement on a named distribution, in canonical form; `RequirementsError` otherwise.

    Accepted: a name, extras, version specifiers and an environment marker.
    Refused: direct references (`name @ URL`), URLs, paths, archives, pip
    options (`-e`, `--index-url`, `--hash`, `-r`), anything else a requirement
    file or pip's command line would interpret. The canonical form (PEP 503
    name, sorted extras and specifiers, packaging's marker spelling) makes
    equivalent spellings one venv.
    """
    if not isinstance(text, str):
        raise RequirementsError(f"a requirement must be a string, not {type(text).__name__}")
    if len(text) > MAX_REQUIREMENT_LENGTH:
        raise RequirementsError(f"requirement longer than {MAX_REQUIREMENT_LENGTH} characters: {clip(text)!r}")
    stripped = text.strip()
    if not stripped:
        raise RequirementsError("empty requirement")
    if stripped.startswith("-"):
        raise RequirementsError(f"pip options are not accepted as requirements: {clip(stripped)!r}")
    if "\n" in stripped or "\r" in stripped:
        raise RequirementsError(f"a requirement is one line: {clip(stripped)!r}")
    try:
        requirement = Requirement(stripped)
    except InvalidRequirement as exc:
        head = stripped.split(";", 1)[0]
        if "://" in stripped or any(c in head for c in "/\\") or head.startswith("."):
            raise RequirementsError(f"URLs and paths are not accepted as requirements: {clip(stripped)!r}") from None
        raise RequirementsError(f"not a PEP 508 requirement on a named distribution: {clip(stripped)!r} "
                                f"({clip(str(exc), 120)})") from None
    if requirement.url:
        raise RequirementsError(f"direct references and URLs are not accepted: {clip(stripped)!r}")
    if requirement.name.lower().endswith(_ARCHIVE_SUFFIXES):
        raise RequirementsError(f"archive files are not accepted as requirements: {clip(stripped)!r}")
    out = canonicalize_name(requirement.name)
    if requirement.extras:
        out += "[" + ",".join(sorted({canonicalize_name(e) for e in requirement.extras})) + "]"
    out += str(requirement.specifier)
    if requirement.marker is not None:
        out += f"; {requirement.marker}"
    return out


def _read_package_file(package_dir: Path, relative: str, cap: int) -> str | None:
    """The text of a file inside the package, or None if absent. A symlink out of the package is refused."""
    root = package_dir.resolve()
    path = package_dir / relative
    if not os.path.lexists(path):
        return None
    real = path.resolve()
    if not real.is_relative_to(root):
        raise RequirementsError(f"{relative} points outside the package")
    if not real.is_file():
        raise RequirementsError(f"{relative} is not a regular file")
    with open(real, "rb") as f:
        data = f.read(cap + 1)
    if len(data) > cap:
        raise RequirementsError(f"{relative} is larger than {cap // 1024} KiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequirementsError(f"{relative} is not UTF-8: {e}") from None


def _requirements_txt_lines(text: str, source: str) -> list[str]:
    """The requirement lines of a pip requirements file: comments and continuations resolved, options refused."""
    out: list[str] = []
    logical = ""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        line, logical = (logical + line).strip(), ""
        if not line:
            continue
        if line.startswith("-"):
            raise RequirementsError(f"{source} line {number}: pip options are not accepted: {clip(line)!r}")
        out.append(line)
    if logical.strip():
        out.append(logical.strip())
    return out


def package_requirements(package_dir: Path) -> list[str]:
    """The package's dependencies, validated and canonical, in declaration order without duplicates.

    `[project].dependencies` of pyproject.toml when it declares them (not
    `dynamic`); otherwise requirements.txt, then server/requirements.txt (what
    `openenv init` scaffolds). `RequirementsError` when none of them declares
    anything or when any entry is not a plain requirement (see
    `normalize_requirement`).
    """
    package_dir = Path(package_dir)
    raw: list | None = None
    source = ""
    text = _read_package_file(package_dir, pyproject.FILE, pyproject.MAX_BYTES)
    if text is not None:
        try:
            project = pyproject.parse(text)
        except pyproject.PyProjectError as exc:
            raise RequirementsError(str(exc)) from None
        source = f"{pyproject.FILE} [project].dependencies"
        if project.dependencies_problem:
            raise RequirementsError(f"{source} {project.dependencies_problem}")
        if project.dependencies is not None:
            raw = list(project.dependencies)
    if raw is None:
        for relative in REQUIREMENTS_TXT_PATHS:
            text = _read_package_file(package_dir, relative, MAX_REQUIREMENTS_TXT_BYTES)
            if text is not None:
                raw, source = _requirements_txt_lines(text, relative), relative
                break
    if raw is None:
        raise RequirementsError(
            "the package declares no dependencies: expected [project].dependencies in pyproject.toml, "
            "requirements.txt or server/requirements.txt"
        )
    if len(raw) > MAX_REQUIREMENTS:
        raise RequirementsError(f"{source} lists {len(raw)} requirements; at most {MAX_REQUIREMENTS} are accepted")
    out: list[str] = []
    for item in raw:
        try:
            requirement = normalize_requirement(item)
        except RequirementsError as e:
            raise RequirementsError(f"{source}: {e}") from None
        if requirement not in out:
            out.append(requirement)
    return out
