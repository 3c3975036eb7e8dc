"""`openenv-hub check`: the hub's own checks, with the code and budgets the workers use (registry/probing.py).

- `check DIR`: DIR is read as the index reads a local folder (content digest, file listing, metadata files),
  its static checks run, and its server is started in the local sandbox and probed, exactly as a worker's
  local runner does: the report is the one the hub would store for that folder (its `target` names the
  folder instead of an id of the hub).
- `check URL`: the runtime checks against a server that already runs (`openenv serve`, `docker run`, a
  Space); there is no package, so no static checks and no `hub.immutable_versioning`.
- `check DIR --url URL`: DIR's static checks and URL's runtime checks, as the space runner judges a Space;
  nothing proves that URL serves DIR, so `hub.immutable_versioning` is left out.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from cli.config import cache_dir
from cli.errors import CliError, UsageError

SANDBOX_PYTHON = "/usr/bin/python3"  # as HUB_SANDBOX_PYTHON defaults (an interpreter `nobody` can run)


@dataclass
class Checked:
    report: dict
    what: str  # e.g. "examples/envs/echo_env in the local sandbox"


def is_url(target: str) -> bool:
    return "://" in target


def server_url(raw: str) -> str:
    """A base URL the probe may contact (by the probe's own rules), or a UsageError saying what is wrong."""
    from registry.conformance import HostNotAllowed
    from registry.conformance.http import check_url

    try:
        if not urlsplit(raw).hostname:
            raise HostNotAllowed(f"{raw!r} names no host")
        check_url(raw, ("*",))
    except (HostNotAllowed, ValueError) as exc:
        raise UsageError(f"Not a server to check: {exc}.") from None
    return raw.rstrip("/")


def package_folder(raw: str) -> Path:
    folder = Path(raw).expanduser()
    if not folder.exists():
        raise UsageError(f"{raw} does not exist: give a package folder or the http(s) URL of a running server.")
    if not folder.is_dir():
        raise UsageError(f"{raw} is not a folder: give a package folder or the http(s) URL of a running server.")
    if not (folder / "openenv.yaml").is_file():
        raise UsageError(f"{raw} has no openenv.yaml: it is not an OpenEnv package folder.")
    return folder.resolve()


def _read(folder: Path):
    from registry import folders, probing

    try:
        digest, listing = folders.local_package_digest(folder)
        facts = folders.package_facts(folder)
        served, _ = folders.local_package_digest(folder)
    except (OSError, ValueError) as exc:
        raise UsageError(f"Could not read {folder}: {exc}.") from None
    return digest, served, probing.Package.from_facts(facts, listing)


def sandbox_config():
    from registry import sandbox

    root = cache_dir() / "sandbox"
    python = SANDBOX_PYTHON if os.access(SANDBOX_PYTHON, os.X_OK) else sys.executable
    return sandbox.SandboxConfig(venv_root=root / "venvs", work_root=root / "work", python=python)


@dataclass(frozen=True)
class Target:
    """What `check` was asked about: a package folder, a server's base URL, or both."""

    folder: Path | None
    url: str | None


def resolve(target: str, *, url: str | None = None) -> Target:
    """The folder and/or URL `target` (and `--url`) name; a UsageError when they name nothing checkable."""
    if is_url(target):
        if url:
            raise UsageError("Give either a URL, or a folder with --url; not two URLs.")
        return Target(None, server_url(target))
    return Target(package_folder(target), server_url(url) if url else None)


def check(target: Target, *, progress: Callable[[str], None]) -> Checked:
    """Run the checks `target` calls for; `progress(step)` is told each stage and check id."""
    from registry import probing
    from registry.conformance import ProbeTarget

    budgets = probing.Budgets()
    if target.folder is None:
        empty = probing.Package(manifest=None, files=[], openenv_requirement="")
        result = probing.probe(
            ProbeTarget(target.url, allowed_hosts=(urlsplit(target.url).hostname,)), empty,
            source={"runner": "url"}, plan=None, config=budgets.probe_config(), checkpoint=progress,
            with_static=False)
        return Checked(result.report, f"the server at {target.url}")
    folder = target.folder
    digest, served, package = _read(folder)
    source = {"sha": digest, "repo_id": str(folder), "runner": "local"}
    if target.url:
        result = probing.probe(
            ProbeTarget(target.url, allowed_hosts=(urlsplit(target.url).hostname,)), package, source=source,
            plan=probing.folder_plan(folder, package.manifest), config=budgets.probe_config(),
            checkpoint=progress)
        return Checked(result.report, f"{folder} served at {target.url}")
    try:
        result = probing.run_in_sandbox(folder, package, source=source, config=sandbox_config(), budgets=budgets,
                                        checkpoint=progress, extra=[probing.immutable_versioning(digest, served=served, how=probing.FOLDER_DIGEST)])
    except probing.IndexUnreachable as exc:
        raise CliError(f"Could not install the package's dependencies: {exc}.") from None
    return Checked(result.report, f"{folder} in the local sandbox")


def stage_message(step: str) -> tuple[str, bool]:
    """What the progress line says for a checkpoint, and whether a piped run prints it too."""
    if step == "sandbox.install":
        return "installing the package's dependencies (the first time takes a minute or two)", True
    if step == "sandbox.start":
        return "starting the server in the local sandbox", True
    if step.startswith(("static.", "hub.openenv_dependency", "hub.runtime_plan")):
        return f"static checks: {step}", False
    return f"probing: {step}", False
