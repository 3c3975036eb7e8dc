"""Where a validation's environment runs, and how it is reached: the glue between a run and the probe.

- **space**: probe the running Space at the host the Hub reports. Only hosts
  matching HUB_PROBE_ALLOWED_HOSTS are contacted and no redirect is followed
  (the probe enforces both). The runtime stage is read first: a sleeping Space
  is not woken by a scheduled run, a Space in BUILD_ERROR/RUNTIME_ERROR fails
  with the stage as evidence, and a Space serving another sha cannot vouch for
  this revision.
- **local**: the package at the pinned revision (the local folder, or a Hub
  snapshot at the sha) installed into a cached, isolated venv and served in
  the sandbox (registry/sandbox.py), reached over a Unix socket.

Both return a RunResult; the environment's own faults become failing checks,
only our transient failures (the Hub or PyPI unreachable) raise TransientError.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings

from registry import conformance, sandbox
from registry import manifest as mf
from registry.conformance import CheckResult, ProbeConfig, ProbeTarget
from registry.hub import FileNotFound, HubClient, HubError, SpaceNotFound
from registry.models import Environment, Revision, ValidationRun
from registry.services.index import local_package_digest

logger = logging.getLogger(__name__)

SLEEPING_STAGES = {"SLEEPING", "PAUSED", "STOPPED"}
WAKEABLE_STAGES = {"SLEEPING"}  # a request wakes a sleeping Space; a paused or stopped one waits for its owner
BROKEN_STAGES = {"BUILD_ERROR", "RUNTIME_ERROR", "CONFIG_ERROR", "NO_APP_FILE"}
TRANSITIONAL_STAGES = {"BUILDING", "RUNNING_BUILDING", "APP_STARTING", "RUNNING_APP_STARTING", "DELETING"}
LOCAL_HOST = "localhost"


class TransientError(Exception):
    """Our side failed (the Hub, PyPI, the disk): the run is requeued, not judged."""


class NotReady(Exception):
    """The Space is building or starting: nothing to judge yet. The run waits for it, without using an attempt."""


@dataclass
class RunResult:
    outcome: str | None = None
    report: dict | None = None
    reason: str = ""
    target_url: str = ""
    cancelled: bool = False
    observed: dict | None = None  # schemas, tools and the episode transcript the server showed (probe.observations)


def probe_config(*, waking: bool = False) -> ProbeConfig:
    """The probe's budgets; waking a sleeping Space adds HUB_PROBE_WAKE_S to its startup (and to the deadline)."""
    wake_s = settings.HUB_PROBE_WAKE_S if waking else 0.0
    return ProbeConfig(
        check_timeout_s=settings.HUB_PROBE_CHECK_TIMEOUT_S,
        deadline_s=settings.HUB_PROBE_DEADLINE_S + wake_s,
        startup_timeout_s=min(settings.HUB_SANDBOX_STARTUP_S, settings.HUB_PROBE_DEADLINE_S) + wake_s,
        max_body_bytes=settings.HUB_PROBE_MAX_BODY_BYTES,
        time_to_first_work_budget_s=settings.HUB_PROBE_FIRST_WORK_BUDGET_S,
        # The task's soft time limit must end the run, not become one check's error.
        passthrough=(SoftTimeLimitExceeded,),
    )


def _manifest_problems(revision: Revision) -> list[str]:
    return [p.message for p in revision.problems.filter(code__startswith="manifest.")]


def _source(run: ValidationRun) -> dict:
    return {"sha": run.revision.sha, "repo_id": run.environment.repo_id, "runner": run.runner}


def _bound(revision: Revision, *, served: str, how: str) -> CheckResult:
    """hub.immutable_versioning: the probed code is exactly the revision's (same sha, or same content digest)."""
    same = served == revision.sha
    return CheckResult(
        check_id="hub.immutable_versioning",
        status=conformance.PASS if same else conformance.FAIL,
        measured={"revision": revision.sha, "served": served, "how": how},
        evidence=[f"{how}: {served}"] + ([] if same else [f"expected {revision.sha}"]),
        remediation="" if same else "Validate the revision that is actually served.",
        duration_s=0.0,
    )


def _report(run: ValidationRun, target: ProbeTarget, *, plan: bytes | None, checkpoint: Callable[[str], None],
            extra: list[CheckResult], started_at: float | None = None, waking: bool = False) -> RunResult:
    revision = run.revision
    observed: dict = {}
    report = conformance.run_validation(
        target, manifest=revision.manifest, files=revision.files, openenv_requirement=revision.openenv_requirement,
        runtime_plan=plan, source=_source(run), config=probe_config(waking=waking), extra_results=extra,
        on_progress=checkpoint, started_at=started_at, manifest_problems=_manifest_problems(revision),
        observed=observed,
    )
    return RunResult(outcome=report["verdict"], report=report, target_url=target.base_url, observed=observed)


def _report_without_server(run: ValidationRun, failure: CheckResult, *, plan: bytes | None,
                           extra: list[CheckResult]) -> RunResult:
    """A verdict when the environment could not even be reached: static checks, the failure, the rest skipped."""
    revision = run.revision
    report = conformance.report_without_runtime(
        manifest=revision.manifest, files=revision.files, openenv_requirement=revision.openenv_requirement,
        runtime_plan=plan, source=_source(run), failure=failure, extra_results=extra,
        manifest_problems=_manifest_problems(revision),
    )
    return RunResult(outcome=report["verdict"], report=report)


# pip output that means the index could not be reached, not that the package is broken.
_PIP_NETWORK_MARKERS = (
    "Temporary failure in name resolution", "Max retries exceeded", "Connection refused", "Connection reset",
    "Read timed out", "ConnectTimeoutError", "NewConnectionError", "HTTP error 5", "503 Service Unavailable",
    "No space left on device",
)


def _pip_transient(exc: sandbox.SandboxError) -> bool:
    return any(marker in exc.log_tail for marker in _PIP_NETWORK_MARKERS)


def _evidence(exc: sandbox.SandboxError, lines: int = 12) -> list[str]:
    # The log tail is the package's own output: public evidence from untrusted code, capped like all evidence.
    """The error's first line, then the last lines of the log it carries."""
    head = str(exc).split("\n", 1)[0]
    tail = [line for line in exc.log_tail.splitlines() if line.strip()][-lines:]
    return [head, *tail]


def _startup_failure(evidence: list[str], remediation: str, measured: dict | None = None) -> CheckResult:
    return CheckResult(check_id="runtime.startup", status=conformance.FAIL, measured=measured or {},
                       evidence=evidence, remediation=remediation, duration_s=0.0)


# --- space ---------------------------------------------------------------------------------------


def _hub_plan(client: HubClient, run: ValidationRun) -> bytes | None:
    """The revision's runtime plan (where its manifest says, capped like the probe caps it), or None."""
    path = conformance.runtime_plan_path(run.revision.manifest)
    if not any(f.get("path") == path for f in run.revision.files):
        return None
    try:
        return client.read_file(run.environment.repo_id, path, sha=run.revision.sha, cap=conformance.MAX_PLAN_BYTES)
    except FileNotFound:
        return None
    except HubError as exc:
        if exc.transient:
            raise TransientError(str(exc)) from exc
        return None


def run_space(run: ValidationRun, checkpoint: Callable[[str], None]) -> RunResult:
    env, revision = run.environment, run.revision
    if env.source != Environment.Source.HUGGINGFACE:
        return RunResult(cancelled=True, reason="A local environment has no running Space; use the local runner.")
    client = HubClient()
    try:
        space = client.space(env.repo_id)
    except SpaceNotFound:
        return RunResult(cancelled=True, reason="The Space is gone from the Hub.")
    except HubError as exc:
        raise TransientError(str(exc)) from exc
    if space.sha != revision.sha:
        return RunResult(cancelled=True, reason=(
            f"The Space now serves {space.sha[:12]}, not this revision; validate this revision with the local runner."))
    stage = space.runtime_stage
    if stage in SLEEPING_STAGES and not run.wake:
        return RunResult(cancelled=True, reason=f"The Space is {stage.lower()}; scheduled checks do not wake it.")
    if stage in SLEEPING_STAGES and stage not in WAKEABLE_STAGES:
        return RunResult(cancelled=True, reason=(
            f"The Space is {stage.lower()} by its owner; a request cannot wake it, so there is nothing to probe."))
    if stage in TRANSITIONAL_STAGES:
        raise NotReady(f"the Space is {stage}")
    bound = _bound(revision, served=space.sha, how="Hub head sha at probe time")
    plan = _hub_plan(client, run)
    if stage in BROKEN_STAGES:
        return _report_without_server(run, _startup_failure(
            [f"Hub runtime stage: {stage}"],
            "The Space does not run: read its build and runtime logs on the Hub and fix the error.",
            {"runtime_stage": stage}), plan=plan, extra=[bound])
    target = ProbeTarget(space.host, allowed_hosts=tuple(settings.HUB_PROBE_ALLOWED_HOSTS))
    result = _report(run, target, plan=plan, checkpoint=checkpoint, extra=[bound], waking=stage in SLEEPING_STAGES)
    # The verdict belongs to the sha only if the Space still serves it now that the probe is over.
    try:
        after = client.space(env.repo_id).sha
    except HubError as exc:
        raise TransientError(f"could not confirm the served sha after the probe: {exc}") from exc
    if after != revision.sha:
        return RunResult(cancelled=True, reason=(
            f"The Space moved from {revision.sha[:12]} to {after[:12]} during the probe; the result could not be "
            "bound to either, so it was dropped."))
    return result


# --- local ---------------------------------------------------------------------------------------


def sandbox_config() -> sandbox.SandboxConfig:
    root = Path(settings.HUB_SANDBOX_DIR)
    return sandbox.SandboxConfig(
        venv_root=root / "venvs", work_root=root / "work", python=settings.HUB_SANDBOX_PYTHON,
        binary_only=settings.HUB_SANDBOX_BINARY_ONLY, require=frozenset(settings.HUB_SANDBOX_REQUIRE),
    )


def sandbox_limits() -> sandbox.SandboxLimits:
    server_s = settings.HUB_SANDBOX_STARTUP_S + settings.HUB_PROBE_DEADLINE_S + 60
    return sandbox.SandboxLimits(
        memory_bytes=settings.HUB_SANDBOX_MEMORY_MB * 2**20, cpu_seconds=settings.HUB_SANDBOX_CPU_S,
        disk_bytes=settings.HUB_SANDBOX_DISK_MB * 2**20,
        startup_timeout_s=settings.HUB_SANDBOX_STARTUP_S,
        wall_seconds=server_s,
        # An install ends on pip's own timeout, with its log, before the task's soft time limit cuts it short.
        pip_timeout_s=max(60.0, settings.HUB_VALIDATION_SOFT_LIMIT_S - server_s - 60),
    )


def _package_at_revision(run: ValidationRun, scratch: Path) -> tuple[Path | None, RunResult | None, CheckResult]:
    """The package folder holding exactly the revision's files, and the check that proves it."""
    env, revision = run.environment, run.revision
    if env.source == Environment.Source.LOCAL:
        folder = Path(env.local_path)
        try:
            digest, _ = local_package_digest(folder)
        except (OSError, ValueError) as exc:
            return None, RunResult(cancelled=True, reason=f"The local folder cannot be read: {exc}."), None
        if digest != revision.sha:
            return None, RunResult(cancelled=True, reason=(
                "The folder changed since this revision was indexed; its new revision will be validated.")), None
        return folder, None, _bound(revision, served=digest, how="content digest of the folder at probe time")
    try:
        folder = HubClient().snapshot(env.repo_id, sha=revision.sha, local_dir=scratch / "package")
    except SpaceNotFound:
        return None, RunResult(cancelled=True, reason="The Space is gone from the Hub."), None
    except HubError as exc:
        if exc.transient:
            raise TransientError(str(exc)) from exc
        return None, RunResult(cancelled=True, reason=f"The revision cannot be downloaded: {exc}."), None
    return folder, None, _bound(revision, served=revision.sha, how="Hub snapshot pinned to the sha")


def _folder_plan(folder: Path, manifest: dict | None) -> bytes | None:
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


def run_local(run: ValidationRun, checkpoint: Callable[[str], None]) -> RunResult:
    config, limits = sandbox_config(), sandbox_limits()
    config.work_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=config.work_root, prefix="snapshot-") as scratch:
        folder, early, bound = _package_at_revision(run, Path(scratch))
        if early:
            return early
        plan = _folder_plan(folder, run.revision.manifest)
        checkpoint("sandbox.install")
        try:
            requirements = sandbox.package_requirements(folder)
        except sandbox.RequirementsError as exc:
            return _report_without_server(run, _startup_failure(
                _evidence(exc), "Declare the server's dependencies in pyproject.toml [project].dependencies as "
                "plain requirements from the package index (no URLs or paths): the sandbox installs nothing else."),
                plan=plan, extra=[bound])
        try:
            venv = sandbox.ensure_venv(requirements, config=config, limits=limits)
        except sandbox.SandboxError as exc:
            if _pip_transient(exc):
                raise TransientError(f"the package index could not be reached: {_evidence(exc, 1)[-1]}") from exc
            return _report_without_server(run, _startup_failure(
                [f"installing {len(requirements)} requirement(s) failed", *_evidence(exc)],
                "Make every dependency installable from PyPI as a wheel for Linux x86_64 and this Python."),
                plan=plan, extra=[bound])
        checkpoint("sandbox.start")
        app = (run.revision.manifest or {}).get("app") or mf.DEFAULT_APP
        try:
            with sandbox.running_server(folder, venv=venv, app=str(app), config=config, limits=limits) as server:
                target = ProbeTarget(server.base_url, uds=server.uds, allowed_hosts=(LOCAL_HOST,))
                return _note_isolation(_report(run, target, plan=plan, checkpoint=checkpoint,
                                               extra=[bound], started_at=server.started_at), server)
        except sandbox.SandboxError as exc:
            return _report_without_server(run, _startup_failure(
                ["the server did not start", *_evidence(exc, 17)],
                f"Make `uvicorn {app}` start from the package folder and answer GET /health.",
                measured={"sandbox_isolation": list(exc.isolation)} if exc.isolation else None), plan=plan, extra=[bound])


def validation_execute(run: ValidationRun, *, checkpoint: Callable[[str], None]) -> RunResult:
    """Run `run` with its runner; the caller records the result."""
    started = time.monotonic()
    result = run_local(run, checkpoint) if run.runner == ValidationRun.Runner.LOCAL else run_space(run, checkpoint)
    logger.info("validation #%s: %s in %.1fs", run.pk, result.outcome or ("cancelled" if result.cancelled else "?"),
                time.monotonic() - started)
    return result
