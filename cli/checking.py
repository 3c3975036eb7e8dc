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
    """A base URL the probe may contact, or a UsageError saying what is wrong with it."""
    try:
        parts = urlsplit(raw)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError as exc:
        raise UsageError(f"{raw!r} is not a valid URL ({exc}).") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{raw!r} is not an http(s) URL of a running server (for example http://127.0.0.1:8000).")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise UsageError(f"{raw!r}: give the server's base URL, without credentials, query or fragment.")
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


def _bound(digest: str, served: str):
    """hub.immutable_versioning as the local runner decides it: the folder's content digest when it was read
    (the revision) against its digest when it is handed to the sandbox."""
    from registry import conformance

    same = served == digest
    return conformance.CheckResult(
        check_id="hub.immutable_versioning", status=conformance.PASS if same else conformance.FAIL,
        measured={"revision": digest, "served": served, "how": "content digest of the folder at probe time"},
        evidence=[f"content digest of the folder at probe time: {served}"] + ([] if same else [f"expected {digest}"]),
        remediation="" if same else "Validate the revision that is actually served.",
    )


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
                                        checkpoint=progress, extra=[_bound(digest, served)])
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
