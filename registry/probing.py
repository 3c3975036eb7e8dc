"""Validating one revision of a package, without Django: what the workers and `openenv-hub check` share.

`registry/runners.py` (the workers' runners) and the publisher's command line (`cli/`) call the same
functions here, with the same budgets, so that a package checked on a publisher's machine gets the report a
worker would give it: the same checks, statuses, evidence and remediation.

- `probe(target, package, ...)`: the probe against a server that answers somewhere (a Space, the sandbox's
  socket, a URL), with the package's static checks first;
- `run_in_sandbox(folder, package, ...)`: install the folder's declared dependencies into a cached venv, serve
  its `app` in the local sandbox and probe it there; a package that does not install or start still gets a
  report (its static checks, the failing `runtime.startup`, every other runtime check skipped).

The caller decides what binds the code served to the revision (`hub.immutable_versioning`, passed in
`extra`) and what a failure of our own means: `IndexUnreachable` is the package index, not the package.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from registry import conformance, sandbox
from registry import manifest as mf
from registry.conformance import CheckResult, ProbeClient, ProbeConfig, ProbeTarget

# How hub.immutable_versioning binds a local folder to its revision.
FOLDER_DIGEST = "content digest of the folder at probe time"

# The sandboxed server is reached over a Unix socket under this name; nothing else may be contacted.
LOCAL_HOST = "localhost"

# pip output that means the index could not be reached, not that the package is broken.
_PIP_NETWORK_MARKERS = (
    "Temporary failure in name resolution", "Max retries exceeded", "Connection refused", "Connection reset",
    "Read timed out", "ConnectTimeoutError", "NewConnectionError", "HTTP error 5", "503 Service Unavailable",
    "No space left on device",
)


class IndexUnreachable(Exception):
    """Installing failed because the package index (or the disk) failed, not because of the package."""


@dataclass(frozen=True)
class Budgets:
    """Every limit of one validation. The defaults are hub/settings.py's (HUB_PROBE_*, HUB_SANDBOX_*,
    HUB_VALIDATION_SOFT_LIMIT_S; a test keeps the two equal), so a check on a publisher's machine is held
    to what a worker holds it to."""

    check_timeout_s: float = 15.0
    deadline_s: float = 180.0
    max_body_bytes: int = 1024 * 1024
    wake_s: float = 300.0
    first_work_budget_s: float = 60.0
    startup_s: float = 120.0
    memory_mb: int = 2048
    disk_mb: int = 1024
    cpu_s: int = 300
    soft_limit_s: int = 1200

    def probe_config(self, *, waking: bool = False,
                     passthrough: tuple[type[BaseException], ...] = ()) -> ProbeConfig:
        """The probe's budgets; waking a sleeping Space adds `wake_s` to its startup (and to the deadline).
        `passthrough`: exceptions that end the run instead of becoming one check's error (a task's time limit)."""
        wake_s = self.wake_s if waking else 0.0
        return ProbeConfig(
            check_timeout_s=self.check_timeout_s,
            deadline_s=self.deadline_s + wake_s,
            startup_timeout_s=min(self.startup_s, self.deadline_s) + wake_s,
            max_body_bytes=self.max_body_bytes,
            time_to_first_work_budget_s=self.first_work_budget_s,
            passthrough=passthrough,
        )

    def sandbox_limits(self) -> sandbox.SandboxLimits:
        server_s = self.startup_s + self.deadline_s + 60
        return sandbox.SandboxLimits(
            memory_bytes=self.memory_mb * 2**20, cpu_seconds=self.cpu_s, disk_bytes=self.disk_mb * 2**20,
            startup_timeout_s=self.startup_s, wall_seconds=server_s,
            # An install ends on pip's own timeout, with its log, before the task's soft time limit cuts it short.
            pip_timeout_s=max(60.0, self.soft_limit_s - server_s - 60),
        )


@dataclass(frozen=True)
class Package:
    """One revision of a package as the index read it: the parsed manifest, the file listing, the openenv
    requirement as declared, and what was wrong with the manifest (its `manifest.*` problems)."""

    manifest: dict | None
    files: list[dict]
    openenv_requirement: str
    manifest_problems: tuple[str, ...] = ()

    @classmethod
    def from_facts(cls, facts: mf.PackageFacts, files: list[dict]) -> Package:
        return cls(manifest=facts.manifest, files=files, openenv_requirement=facts.openenv_requirement,
                   manifest_problems=tuple(p.message for p in facts.problems if p.code.startswith("manifest.")))

    @property
    def app(self) -> str:
        return str((self.manifest or {}).get("app") or mf.DEFAULT_APP)


@dataclass
class RunResult:
    outcome: str | None = None
    report: dict | None = None
    reason: str = ""
    target_url: str = ""
    cancelled: bool = False
    observed: dict | None = None  # schemas, tools and the episode transcript the server showed (probe.observations)


def probe(target: ProbeTarget, package: Package, *, source: dict, plan: bytes | None, config: ProbeConfig,
          checkpoint: Callable[[str], None] | None, extra: Sequence[CheckResult] = (),
          started_at: float | None = None, with_static: bool = True) -> RunResult:
    """The report of the server at `target` for `package` (static checks first unless `with_static` is False)."""
    observed: dict = {}
    report = conformance.run_validation(
        target, manifest=package.manifest, files=package.files, openenv_requirement=package.openenv_requirement,
        runtime_plan=plan, source=source, config=config, extra_results=extra, on_progress=checkpoint,
        started_at=started_at, manifest_problems=package.manifest_problems, observed=observed,
        with_static=with_static,
    )
    return RunResult(outcome=report["verdict"], report=report, target_url=target.base_url, observed=observed)


def immutable_versioning(revision: str, *, served: str, how: str) -> CheckResult:
    """hub.immutable_versioning: the probed code is exactly the revision's (same sha, or same content digest).
    The caller says what it compared (`how`): only it knows what was served."""
    same = served == revision
    return CheckResult(
        check_id="hub.immutable_versioning",
        status=conformance.PASS if same else conformance.FAIL,
        measured={"revision": revision, "served": served, "how": how},
        evidence=[f"{how}: {served}"] + ([] if same else [f"expected {revision}"]),
        remediation="" if same else "Validate the revision that is actually served.",
        duration_s=0.0,
    )


def report_without_server(package: Package, failure: CheckResult, *, source: dict, plan: bytes | None,
                          extra: Sequence[CheckResult] = ()) -> RunResult:
    """A verdict when the environment could not even be reached: static checks, the failure, the rest skipped."""
    report = conformance.report_without_runtime(
        manifest=package.manifest, files=package.files, openenv_requirement=package.openenv_requirement,
        runtime_plan=plan, source=source, failure=failure, extra_results=extra,
        manifest_problems=package.manifest_problems,
    )
    return RunResult(outcome=report["verdict"], report=report)


def startup_failure(evidence: list[str], remediation: str, measured: dict | None = None) -> CheckResult:
    return CheckResult(check_id="runtime.startup", status=conformance.FAIL, measured=measured or {},
                       evidence=evidence, remediation=remediation, duration_s=0.0)


def evidence(exc: sandbox.SandboxError, lines: int = 12) -> list[str]:
    """The error's first line, then the last lines of the log it carries."""
    # The log tail is the package's own output: public evidence from untrusted code, capped like all evidence.
    head = str(exc).split("\n", 1)[0]
    tail = [line for line in exc.log_tail.splitlines() if line.strip()][-lines:]
    return [head, *tail]


def folder_plan(folder: Path, manifest: dict | None) -> bytes | None:
    """The runtime plan inside a package folder (where its manifest says), capped; never through a link out of it."""
    root = folder.resolve()
    path = (folder / conformance.runtime_plan_path(manifest)).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        return None
    with open(path, "rb") as fh:
        return fh.read(conformance.MAX_PLAN_BYTES + 1)


def _note_isolation(result: RunResult, server: sandbox.RunningServer) -> RunResult:
    """Record what the sandbox applied beside runtime.startup's measurements (report-v2 allows no other place)."""
    for check in (result.report or {}).get("results", []):
        if check["check_id"] == "runtime.startup":
            check["measured"]["sandbox_isolation"] = list(server.isolation)
    return result


class ServeFailed(Exception):
    """The package could not be served in the sandbox; the message says why (for a run's reason)."""


@contextmanager
def serving(folder: Path, package: Package, *, config: sandbox.SandboxConfig, budgets: Budgets) -> Iterator[ProbeClient]:
    """Serve `folder`'s app in the sandbox (as `run_in_sandbox` does) and yield a client of it; always torn down.

    For work other than a validation (evaluation episodes). Raises IndexUnreachable when the package index
    could not be reached, ServeFailed when the package cannot be installed or started.
    """
    limits = budgets.sandbox_limits()
    config.work_root.mkdir(parents=True, exist_ok=True)
    try:
        venv = sandbox.ensure_venv(sandbox.package_requirements(folder), config=config, limits=limits)
    except sandbox.RequirementsError as exc:
        raise ServeFailed(f"the package's requirements cannot be installed: {exc}") from exc
    except sandbox.SandboxError as exc:
        if any(marker in exc.log_tail for marker in _PIP_NETWORK_MARKERS):
            raise IndexUnreachable(f"the package index could not be reached: {evidence(exc, 1)[-1]}") from exc
        raise ServeFailed(f"installing the package failed: {evidence(exc, 1)[-1]}") from exc
    try:
        with sandbox.running_server(folder, venv=venv, app=package.app, config=config, limits=limits) as server:
            with ProbeClient(server.base_url, allowed_hosts=(LOCAL_HOST,), uds=server.uds) as client:
                yield client
    except sandbox.SandboxError as exc:
        raise ServeFailed(f"the server did not start: {evidence(exc, 1)[-1]}") from exc


def run_in_sandbox(folder: Path, package: Package, *, source: dict, config: sandbox.SandboxConfig, budgets: Budgets,
                   checkpoint: Callable[[str], None], extra: Sequence[CheckResult] = (),
                   passthrough: tuple[type[BaseException], ...] = ()) -> RunResult:
    """Install `folder`'s dependencies, serve its app in the sandbox, probe it, always tear it down.

    `checkpoint` is called with "sandbox.install", "sandbox.start", then each check id. Raises
    IndexUnreachable when the package index could not be reached; every fault of the package is its report.
    """
    limits = budgets.sandbox_limits()
    config.work_root.mkdir(parents=True, exist_ok=True)
    plan = folder_plan(folder, package.manifest)
    checkpoint("sandbox.install")
    try:
        requirements = sandbox.package_requirements(folder)
    except sandbox.RequirementsError as exc:
        return report_without_server(package, startup_failure(
            evidence(exc), "Declare the server's dependencies in pyproject.toml [project].dependencies as "
            "plain requirements from the package index (no URLs or paths): the sandbox installs nothing else."),
            source=source, plan=plan, extra=extra)
    try:
        venv = sandbox.ensure_venv(requirements, config=config, limits=limits)
    except sandbox.SandboxError as exc:
        if any(marker in exc.log_tail for marker in _PIP_NETWORK_MARKERS):
            raise IndexUnreachable(f"the package index could not be reached: {evidence(exc, 1)[-1]}") from exc
        return report_without_server(package, startup_failure(
            [f"installing {len(requirements)} requirement(s) failed", *evidence(exc)],
            "Make every dependency installable from PyPI as a wheel for Linux x86_64 and this Python."),
            source=source, plan=plan, extra=extra)
    checkpoint("sandbox.start")
    try:
        with sandbox.running_server(folder, venv=venv, app=package.app, config=config, limits=limits) as server:
            target = ProbeTarget(server.base_url, uds=server.uds, allowed_hosts=(LOCAL_HOST,))
            return _note_isolation(probe(
                target, package, source=source, plan=plan, config=budgets.probe_config(passthrough=passthrough),
                checkpoint=checkpoint, extra=extra, started_at=server.started_at), server)
    except sandbox.SandboxError as exc:
        return report_without_server(package, startup_failure(
            ["the server did not start", *evidence(exc, 17)],
            f"Make `uvicorn {package.app}` start from the package folder and answer GET /health.",
            measured={"sandbox_isolation": list(exc.isolation)} if exc.isolation else None),
            source=source, plan=plan, extra=extra)
