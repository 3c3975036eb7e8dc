"""pyproject.toml, read one way for everyone: the indexer's package facts and the sandbox's dependencies.

Pure: text in, facts out. Requirements are understood by `packaging`, the
library pip itself uses, so the hub and pip never disagree about what a
requirement names.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

FILE = "pyproject.toml"
MAX_BYTES = 256 * 1024


class PyProjectError(ValueError):
    """The file is not TOML that Python can read; the message says where."""


@dataclass(frozen=True)
class PyProject:
    """What a pyproject.toml declares about its project.

    `dependencies` is None when they are not declared statically (no
    [project] table, no key, or listed in `dynamic`); `dependencies_problem`
    says why a declared list cannot be used.
    """

    has_project: bool = False
    name: str = ""
    dependencies: tuple[str, ...] | None = None
    dependencies_problem: str = ""


def parse(text: str) -> PyProject:
    """Read pyproject.toml text; PyProjectError when it is not valid TOML."""
    try:
        data = tomllib.loads(text)
    except (ValueError, RecursionError) as exc:  # TOMLDecodeError, or a value Python will not convert
        raise PyProjectError(f"{FILE} is not valid TOML: {exc}") from None
    project = data.get("project")
    if not isinstance(project, dict):
        return PyProject()
    name = project.get("name") if isinstance(project.get("name"), str) else ""
    if "dependencies" not in project:
        return PyProject(has_project=True, name=name)
    declared = project["dependencies"]
    if not isinstance(declared, list) or not all(isinstance(item, str) for item in declared):
        return PyProject(has_project=True, name=name, dependencies_problem="must be a list of strings")
    return PyProject(has_project=True, name=name, dependencies=tuple(declared))


def requirement_name(text: str) -> str | None:
    """The canonical name of the distribution a PEP 508 requirement asks for (`OpenEnv_Core>=1` → openenv-core),
    or None when it is not one."""
    try:
        return canonicalize_name(Requirement(text).name)
    except InvalidRequirement:
        return None
