"""Where a validation's environment runs, and how it is reached: the glue between a run and the probe.

- **space**: probe the running Space at the host the Hub reports. Only hosts
  matching HUB_PROBE_ALLOWED_HOSTS are contacted and no redirect is followed
  (the probe enforces both). The runtime stage is read first: a sleeping Space
  is not woken by a scheduled run, a Space in BUILD_ERROR/RUNTIME_ERROR fails
  with the stage as evidence, and a Space serving another sha cannot vouch for
  this revision.
- **local**: the package at the pinned revision (the local folder, or a Hub
  snapshot at the sha) installed into a cached, isolated venv and served in
  the sandbox (registry/sandbox/), reached over a Unix socket.

What a run does once it has a server or a folder is `registry/probing.py`, shared with `openenv-hub check`;
this module decides which revision is probed, where, and binds the result to it.

Both return a RunResult; the environment's own faults become failing checks,
only our transient failures (the Hub or PyPI unreachable) raise TransientError.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings

from registry import conformance, probing, sandbox
from registry.conformance import CheckResult, ProbeClient, ProbeConfig, ProbeTarget
from registry.hub import FileNotFound, HubClient, HubError, SpaceNotFound
from registry.models import Environment, Revision, ValidationRun
from registry.folders import local_package_digest

logger = logging.getLogger(__name__)

SLEEPING_STAGES = {"SLEEPING", "PAUSED", "STOPPED"}
WAKEABLE_STAGES = {"SLEEPING"}  # a request wakes a sleeping Space; a paused or stopped one waits for its owner
BROKEN_STAGES = {"BUILD_ERROR", "RUNTIME_ERROR", "CONFIG_ERROR", "NO_APP_FILE"}
TRANSITIONAL_STAGES = {"BUILDING", "RUNNING_BUILDING", "APP_STARTING", "RUNNING_APP_STARTING", "DELETING"}


class TransientError(Exception):
    """Our side failed (the Hub, PyPI, the disk): the run is requeued, not judged."""


class NotReady(Exception):
    """The Space is building or starting: nothing to judge yet. The run waits for it, without using an attempt."""


RunResult = probing.RunResult


def budgets() -> probing.Budgets:
    """The validation budgets, from the settings."""
    return probing.Budgets(
        check_timeout_s=settings.HUB_PROBE_CHECK_TIMEOUT_S, deadline_s=settings.HUB_PROBE_DEADLINE_S,
        max_body_bytes=settings.HUB_PROBE_MAX_BODY_BYTES, wake_s=settings.HUB_PROBE_WAKE_S,
        first_work_budget_s=settings.HUB_PROBE_FIRST_WORK_BUDGET_S, startup_s=settings.HUB_SANDBOX_STARTUP_S,
        memory_mb=settings.HUB_SANDBOX_MEMORY_MB, disk_mb=settings.HUB_SANDBOX_DISK_MB,
        cpu_s=settings.HUB_SANDBOX_CPU_S, soft_limit_s=settings.HUB_VALIDATION_SOFT_LIMIT_S,
    )


def probe_config(*, waking: bool = False) -> ProbeConfig:
    """The probe's budgets; waking a sleeping Space adds HUB_PROBE_WAKE_S to its startup (and to the deadline)."""
    # The task's soft time limit must end the run, not become one check's error.
    return budgets().probe_config(waking=waking, passthrough=(SoftTimeLimitExceeded,))


def _package(revision: Revision) -> probing.Package:
    problems = revision.problems.filter(code__startswith="manifest.")
    return probing.Package(manifest=revision.manifest, files=revision.files,
                           openenv_requirement=revision.openenv_requirement,
                           manifest_problems=tuple(p.message for p in problems))


def _source(run: ValidationRun) -> dict:
    return {"sha": run.revision.sha, "repo_id": run.environment.repo_id, "runner": run.runner}


def _bound(revision: Revision, *, served: str, how: str) -> CheckResult:
    return probing.immutable_versioning(revision.sha, served=served, how=how)


def _report(run: ValidationRun, target: ProbeTarget, *, plan: bytes | None, checkpoint: Callable[[str], None],
            extra: list[CheckResult], waking: bool = False) -> RunResult:
    return probing.probe(target, _package(run.revision), source=_source(run), plan=plan,
                         config=probe_config(waking=waking), checkpoint=checkpoint, extra=extra)


def _report_without_server(run: ValidationRun, failure: CheckResult, *, plan: bytes | None,
                           extra: list[CheckResult]) -> RunResult:
    """A verdict when the environment could not even be reached: static checks, the failure, the rest skipped."""
    return probing.report_without_server(_package(run.revision), failure, source=_source(run), plan=plan, extra=extra)


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
        return _report_without_server(run, probing.startup_failure(
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
        return folder, None, _bound(revision, served=digest, how=probing.FOLDER_DIGEST)
    try:
        folder = HubClient().snapshot(env.repo_id, sha=revision.sha, local_dir=scratch / "package")
    except SpaceNotFound:
        return None, RunResult(cancelled=True, reason="The Space is gone from the Hub."), None
    except HubError as exc:
        if exc.transient:
            raise TransientError(str(exc)) from exc
        return None, RunResult(cancelled=True, reason=f"The revision cannot be downloaded: {exc}."), None
    return folder, None, _bound(revision, served=revision.sha, how="Hub snapshot pinned to the sha")


def run_local(run: ValidationRun, checkpoint: Callable[[str], None]) -> RunResult:
    config = sandbox_config()
    config.work_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=config.work_root, prefix="snapshot-") as scratch:
        folder, early, bound = _package_at_revision(run, Path(scratch))
        if early:
            return early
        try:
            return probing.run_in_sandbox(
                folder, _package(run.revision), source=_source(run), config=config, budgets=budgets(),
                checkpoint=checkpoint, extra=[bound], passthrough=(SoftTimeLimitExceeded,))
        except probing.IndexUnreachable as exc:
            raise TransientError(str(exc)) from exc


def validation_execute(run: ValidationRun, *, checkpoint: Callable[[str], None]) -> RunResult:
    """Run `run` with its runner; the caller records the result."""
    started = time.monotonic()
    result = run_local(run, checkpoint) if run.runner == ValidationRun.Runner.LOCAL else run_space(run, checkpoint)
    logger.info("validation #%s: %s in %.1fs", run.pk, result.outcome or ("cancelled" if result.cancelled else "?"),
                time.monotonic() - started)
    return result


# --- evaluations -----------------------------------------------------------------------------------


class Unavailable(Exception):
    """The environment cannot be played now (gone, moved on, asleep, broken); the message says why."""


@contextmanager
def evaluation_client(run, checkpoint: Callable[[str], None]) -> Iterator[ProbeClient]:
    """A client of the environment at `run.revision`, served as its validation was: the running Space (only
    while it still serves that sha) or the package in the local sandbox. Raises Unavailable, NotReady or
    TransientError as a validation would end."""
    from registry.services.validation import default_runner

    runner = (run.params or {}).get("runner") or default_runner(run.environment)
    if runner == ValidationRun.Runner.LOCAL:
        config = sandbox_config()
        config.work_root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=config.work_root, prefix="evaluation-") as scratch:
            folder, early, _ = _package_at_revision(run, Path(scratch))
            if early:
                raise Unavailable(early.reason)
            checkpoint("sandbox.start")
            try:
                with probing.serving(folder, _package(run.revision), config=config, budgets=budgets()) as client:
                    yield client
            except probing.IndexUnreachable as exc:
                raise TransientError(str(exc)) from exc
            except probing.ServeFailed as exc:
                raise Unavailable(str(exc)) from exc
        return
    env, revision = run.environment, run.revision
    client = HubClient()
    try:
        space = client.space(env.repo_id)
    except SpaceNotFound as exc:
        raise Unavailable("The Space is gone from the Hub.") from exc
    except HubError as exc:
        raise TransientError(str(exc)) from exc
    if space.sha != revision.sha:
        raise Unavailable(f"The Space now serves {space.sha[:12]}, not this revision.")
    if space.runtime_stage in TRANSITIONAL_STAGES:
        raise NotReady(f"the Space is {space.runtime_stage}")
    if space.runtime_stage in SLEEPING_STAGES or space.runtime_stage in BROKEN_STAGES:
        raise Unavailable(f"The Space is {space.runtime_stage.lower()}; there is nothing to play.")
    with ProbeClient(space.host, allowed_hosts=tuple(settings.HUB_PROBE_ALLOWED_HOSTS)) as probe_client:
        yield probe_client


def _action_schema(run) -> dict | None:
    """The action schema the revision's server showed at its latest validation (what the players act on)."""
    observed = (ValidationRun.objects.filter(revision_id=run.revision_id, state=ValidationRun.State.FINISHED)
                .exclude(observed=None).order_by("-finished_at", "-id").values_list("observed", flat=True).first())
    schemas = observed.get("schemas") if isinstance(observed, dict) else None
    action = schemas.get("action") if isinstance(schemas, dict) else None
    return action if isinstance(action, dict) else None


def evaluation_execute(run, *, checkpoint: Callable[..., None]):
    """Play `run` (a baseline or a model) against the environment; returns (played evaluations, report, target).

    The report holds the baseline's semantic checks (report-v2 check results) and the players' notes.
    `checkpoint` is called with a step name or none (a Heartbeat's `check`).
    Raises Unavailable, NotReady or TransientError as `evaluation_client` does.
    """
    from registry.evaluation import baseline, model

    action_schema = _action_schema(run)
    if action_schema is None:
        raise Unavailable("The revision's validation recorded no action schema, so there is nothing to act on.")
    total_s = max(60.0, settings.HUB_EVAL_SOFT_LIMIT_S - 120.0)
    with evaluation_client(run, checkpoint) as client:
        if run.kind == "baseline":
            result = baseline.play_baseline(
                client, action_schema=action_schema, manifest=run.revision.manifest,
                seeds=list(range(settings.HUB_EVAL_BASELINE_EPISODES)), max_steps=settings.HUB_EVAL_MAX_STEPS,
                episode_deadline_s=settings.HUB_EVAL_EPISODE_S, total_deadline_s=total_s, on_progress=checkpoint)
            checks = [c.to_dict() for c in baseline.semantic_checks(result, run.revision.manifest)]
            return result.evaluations, {"checks": checks, "notes": result.notes}, client.base_url
        if not settings.HUB_EVAL_OPENAI_BASE_URL:
            raise Unavailable("No model endpoint is configured (HUB_EVAL_OPENAI_BASE_URL).")
        episodes = int((run.params or {}).get("episodes") or 10)
        played = model.play_model(
            client, endpoint=settings.HUB_EVAL_OPENAI_BASE_URL, api_key=settings.HUB_EVAL_OPENAI_API_KEY,
            model=run.subject, action_schema=action_schema, seeds=list(range(episodes)),
            max_steps=settings.HUB_EVAL_MAX_STEPS, max_tokens=settings.HUB_EVAL_MAX_TOKENS,
            max_tokens_per_call=settings.HUB_EVAL_MAX_TOKENS_PER_CALL,
            episode_deadline_s=settings.HUB_EVAL_EPISODE_S, total_deadline_s=total_s,
            request_timeout_s=min(120.0, settings.HUB_EVAL_EPISODE_S), on_progress=checkpoint)
        return [played], {"notes": list(played.notes)}, client.base_url
