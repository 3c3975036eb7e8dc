"""Evaluations: recording results (hub-run, imported, self-reported) and the hub's own evaluation runs.

A result is written whole or not at all, after every check: finite rewards in the revision's declared
range, episode counts that add up, a known revision, and an idempotency key that makes a re-submission
return the first row (the same key with different episodes is refused). The statistics are computed here
from the episodes (registry.evalstats), never taken from the submitter.

Evaluation runs (baselines after a pass, models on request) go through the same state machine as
validations (registry.services.runs) on their own queue.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from registry import evalstats
from registry.conformance import static
from registry.evaluation import ingest
from registry.evaluation.episodes import ENDINGS, PlayedEvaluation
from registry.identity import HubUser
from registry.models import Environment, Evaluation, EvaluationRun, Revision, ValidationRun
from registry.services import runs

logger = logging.getLogger(__name__)

MAX_EPISODES = 10_000
MAX_TEXT = 200


class EvaluationRefused(ValueError):
    """The result cannot be stored as given; the message says what to change. Nothing was stored."""

    def __init__(self, message: str, *, code: str = "invalid", status: int = 400):
        super().__init__(message)
        self.code, self.status = code, status


def _finish_error(*, run_id: int, reason: str, attempt: int | None = None, stale_before=None) -> bool:
    return evaluation_run_finish(run_id=run_id, outcome=EvaluationRun.Outcome.ERROR, reason=reason, attempt=attempt,
                                 stale_before=stale_before)


EVALUATION = runs.RunKind(label="evaluation", model=EvaluationRun, task="registry.evaluate_run", queue="evaluation",
                          finish_error=_finish_error)


# --- results ----------------------------------------------------------------------------------------------


def _measured_on(revision: Revision) -> tuple[str, str]:
    """The revision's schema digest and verdict from its latest finished validation ("" when none)."""
    run = (ValidationRun.objects.filter(revision=revision, state=ValidationRun.State.FINISHED)
           .order_by("-finished_at", "-id").values_list("schema_digest", "outcome").first())
    return run or ("", "")


def _episode_problems(played: PlayedEvaluation, revision: Revision) -> str:
    """Why these episodes cannot be stored ("" when they can)."""
    episodes = played.episodes
    if not episodes:
        return "an evaluation needs at least one episode"
    if len(episodes) > MAX_EPISODES:
        return f"{len(episodes)} episodes is more than the {MAX_EPISODES} one evaluation may hold"
    low, high = static.reward_range(revision.manifest)
    for index, episode in enumerate(episodes):
        reward = episode.reward
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
            return f"episode {index}: the reward must be a finite number, not {reward!r}"
        if not isinstance(episode.steps, int) or episode.steps < 0:
            return f"episode {index}: steps must be a whole number of at least 0"
        if episode.ended not in ENDINGS:
            return f"episode {index}: ended must be one of {', '.join(ENDINGS)}"
    try:  # the declared range bounds each step's reward; an episode's reward is at most their sum
        ingest.check_reward_range(episodes, low, high)
    except (ingest.IngestError, ValueError) as exc:
        return str(exc)
    for name in ("agent", "harness"):
        value = getattr(played, name)
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_TEXT:
            return f"{name} must be a non-empty string of at most {MAX_TEXT} characters"
    if played.agent_kind not in Evaluation.AgentKind.values:
        return f"agent kind must be one of {', '.join(Evaluation.AgentKind.values)}"
    return ""


def payload_digest(played: PlayedEvaluation) -> str:
    """What an idempotency key promises: the same agent, harness and episodes."""
    body = {"agent": played.agent, "agent_kind": played.agent_kind, "agent_revision": played.agent_revision,
            "harness": played.harness, "harness_version": played.harness_version,
            "episodes": [e.to_dict() for e in played.episodes]}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def evaluation_record(*, revision: Revision, provenance: str, played: PlayedEvaluation, submitted_by: str,
                      source: dict | None = None, run: EvaluationRun | None = None,
                      idempotency_key: str | None = None) -> tuple[Evaluation, bool]:
    """Store one evaluation of `revision`, its statistics computed from its episodes. Returns (row, created).

    Raises EvaluationRefused (nothing stored) for bad episodes, and for an idempotency key already used with
    different episodes; the same key with the same episodes returns the first row.
    """
    problem = _episode_problems(played, revision)
    if problem:
        raise EvaluationRefused(problem)
    if idempotency_key is not None and not (0 < len(idempotency_key) <= 128):
        raise EvaluationRefused("idempotency_key must be 1 to 128 characters")
    digest = payload_digest(played)
    if idempotency_key:
        existing = Evaluation.objects.filter(environment_id=revision.environment_id,
                                             idempotency_key=idempotency_key).first()
        if existing is not None:
            return _same_or_refused(existing, digest)
    rewards = [float(e.reward) for e in played.episodes]
    summary = evalstats.summarize(rewards)
    successes = [e.success for e in played.episodes if isinstance(e.success, bool)]
    schema_digest, verdict = _measured_on(revision)
    try:
        with transaction.atomic():
            row = Evaluation.objects.create(
                environment_id=revision.environment_id, revision=revision, provenance=provenance, run=run,
                agent=played.agent.strip(), agent_kind=played.agent_kind, agent_revision=played.agent_revision[:64],
                harness=played.harness.strip(), harness_version=played.harness_version[:64],
                client_version=played.client_version[:64], episodes=[e.to_dict() for e in played.episodes],
                episode_count=len(rewards), seeds=[e.seed for e in played.episodes],
                mean=summary.mean, std=summary.std, stderr=summary.sem, ci_low=summary.ci_low,
                ci_high=summary.ci_high, ci_method=summary.ci_method,
                wall_s=math.fsum(max(0.0, float(e.wall_s or 0)) for e in played.episodes),
                success_rate=(sum(successes) / len(successes)) if successes else None,
                submitted_by=submitted_by[:200], source={**(source or {}), "payload_digest": digest},
                notes=list(played.notes)[:20], idempotency_key=idempotency_key or None,
                schema_digest=schema_digest, verdict=verdict or "",
            )
    except IntegrityError:  # a concurrent submission with the same key won
        existing = Evaluation.objects.get(environment_id=revision.environment_id, idempotency_key=idempotency_key)
        return _same_or_refused(existing, digest)
    logger.info("evaluation: %s on %s (%s): mean %.4f over %d", row.agent, revision, provenance, row.mean, len(rewards))
    return row, True


def _same_or_refused(existing: Evaluation, digest: str) -> tuple[Evaluation, bool]:
    if existing.source.get("payload_digest") != digest:
        raise EvaluationRefused("this idempotency_key was already used for different episodes; use a new key",
                                code="conflict", status=409)
    return existing, False


# --- hub-run evaluations ---------------------------------------------------------------------------------


def evaluation_run_request(*, revision: Revision, kind: str, trigger: str, subject: str = "",
                           params: dict | None = None, requested_by=None) -> tuple[EvaluationRun, bool]:
    """Queue an evaluation run of `revision`, or return the live one of the same kind and subject."""
    live = EvaluationRun.objects.filter(revision=revision, kind=kind, subject=subject,
                                        state__in=EvaluationRun.LIVE_STATES)
    existing = live.first()
    if existing:
        return existing, False
    try:
        with transaction.atomic():
            run = EvaluationRun.objects.create(
                environment_id=revision.environment_id, revision=revision, kind=kind, subject=subject[:200],
                params=params or {}, trigger=trigger,
                requested_by=requested_by if getattr(requested_by, "pk", None) else None,
                requested_by_hub=requested_by.name if isinstance(requested_by, HubUser) else "",
            )
            runs.enqueue(EVALUATION, run.pk)
    except IntegrityError:
        return live.get(), False
    logger.info("evaluation: queued #%d (%s %s) for %s", run.pk, kind, subject, revision)
    return run, True


def baseline_after_pass(run: ValidationRun) -> EvaluationRun | None:
    """A revision that passed (or passed with warnings) gets its baseline, once per revision, when enabled."""
    if not settings.HUB_EVAL_BASELINE or run.outcome not in (ValidationRun.Outcome.PASS, ValidationRun.Outcome.WARN):
        return None
    if run.environment.source == Environment.Source.CATALOG:
        return None
    if EvaluationRun.objects.filter(revision_id=run.revision_id, kind=EvaluationRun.Kind.BASELINE).exclude(
            state=EvaluationRun.State.CANCELLED).exists():
        return None
    evaluation_run, _ = evaluation_run_request(
        revision=run.revision, kind=EvaluationRun.Kind.BASELINE, trigger=ValidationRun.Trigger.NEW_REVISION,
        params={"runner": run.runner, "validation_run": run.pk})
    return evaluation_run


def evaluation_run_start(*, run_id: int, worker: str = "") -> EvaluationRun | None:
    return runs.start(EVALUATION, run_id, worker=worker)


def evaluation_run_heartbeat(*, run_id: int, attempt: int | None = None) -> None:
    runs.heartbeat(EVALUATION, run_id, attempt=attempt)


def evaluation_run_cancel(*, run_id: int, reason: str, attempt: int | None = None) -> bool:
    return runs.cancel(EVALUATION, run_id, reason=reason, attempt=attempt)


def evaluation_run_requeue(*, run_id: int, reason: str, countdown: float = 0, attempt: int | None = None) -> bool:
    return runs.requeue(EVALUATION, run_id, reason=reason, countdown=countdown, attempt=attempt)


def evaluation_runs_reap(**kwargs) -> dict[str, int]:
    return runs.reap(EVALUATION, **kwargs)


def evaluation_run_finish(*, run_id: int, outcome: str, reason: str = "", report: dict | None = None,
                          played: list[PlayedEvaluation] | tuple = (), target_url: str = "",
                          attempt: int | None = None, stale_before=None) -> bool:
    """running → finished; the played episodes become hub-run results in the same transaction, and a baseline's
    semantic checks join the validation report of the revision. False when the run was no longer ours."""
    from registry.services.validation import validation_report_amend

    with transaction.atomic():
        finished = bool(runs.running(EVALUATION, run_id, attempt, stale_before=stale_before).update(
            state=EvaluationRun.State.FINISHED, outcome=outcome, reason=reason[:2000], report=report,
            target_url=target_url[:500], finished_at=timezone.now()))
        if not finished or outcome != EvaluationRun.Outcome.DONE:
            return finished
        run = EvaluationRun.objects.select_related("revision").get(pk=run_id)
        for each in played:
            if each.episodes:
                evaluation_record(revision=run.revision, provenance=Evaluation.Provenance.HUB_RUN, played=each,
                                  submitted_by="hub", run=run, source={"run": run.pk, "kind": run.kind})
        checks = (report or {}).get("checks") or []
        validation_id = (run.params or {}).get("validation_run")
        if checks and validation_id:
            validation_report_amend(run_id=validation_id, results=checks)
    return True


# --- imports from the Hub -------------------------------------------------------------------------------------

COLLECT_RESULTS, COLLECT_METADATA = "results.jsonl", "metadata.json"


def evaluation_import(*, environment: Environment, dataset: str, dataset_revision: str | None, revision: str | None,
                      mapping: str | None, submitted_by: str, client=None) -> tuple[Evaluation, bool]:
    """Import an `openenv collect` dataset from the Hub, pinned to its commit: the hub reads results.jsonl and
    metadata.json, matches the environment (metadata `env_base_url` against this environment's Space host, or
    the explicit `mapping`), and stores the episodes as an imported result of `revision` (default: head).
    Importing the same dataset commit twice returns the first row. Raises EvaluationRefused (503 when the Hub
    cannot be read)."""
    from registry.hub import DatasetNotFound, HubClient, HubError

    client = client or HubClient()
    try:
        facts = client.dataset(dataset, revision=dataset_revision)
        if COLLECT_RESULTS not in facts.files or COLLECT_METADATA not in facts.files:
            raise EvaluationRefused(f"{dataset}@{facts.sha[:12]} has no {COLLECT_RESULTS} and {COLLECT_METADATA} at its "
                                    "root: is it an `openenv collect` dataset?")
        results = client.read_dataset_file(dataset, COLLECT_RESULTS, sha=facts.sha, cap=settings.HUB_EVAL_MAX_BYTES)
        metadata = client.read_dataset_file(dataset, COLLECT_METADATA, sha=facts.sha, cap=256 * 1024)
    except DatasetNotFound as exc:
        raise EvaluationRefused(f"No public dataset {dataset} on the Hub (or no such revision): {exc}") from exc
    except HubError as exc:
        if getattr(exc, "transient", False):
            raise EvaluationRefused(f"The Hub could not be read: {exc}", code="hub_unavailable", status=503) from exc
        raise EvaluationRefused(f"The dataset could not be read: {exc}") from exc
    try:
        collected = ingest.read_collect_dataset(results, metadata, max_episodes=settings.HUB_EVAL_MAX_EPISODES,
                                                max_bytes=settings.HUB_EVAL_MAX_BYTES)
        head = environment.head
        candidates = [ingest.EnvironmentCandidate(repo_id=environment.repo_id, host=head.host if head else "")]
        match = ingest.match_environment(collected.metadata, mapping=mapping, candidates=candidates)
    except ingest.IngestError as exc:
        raise EvaluationRefused(str(exc)) from exc
    if match.repo_id.lower() != environment.repo_id.lower():
        raise EvaluationRefused(f"the dataset belongs to {match.repo_id}, not {environment.repo_id}")
    target = _revision_of(environment, revision)
    meta = collected.metadata
    played = collected.played()
    played.notes.insert(0, match.detail)
    source = {"dataset": dataset, "dataset_revision": facts.sha, "matched_by": match.matched_by,
              "env_base_url": meta.env_base_url, "provider": meta.provider}
    return evaluation_record(revision=target, provenance=Evaluation.Provenance.IMPORTED, played=played,
                             submitted_by=submitted_by, source=source,
                             idempotency_key=f"import:{dataset}@{facts.sha}"[:128])


def _revision_of(environment: Environment, ref: str | None) -> Revision:
    from registry import selectors

    if not ref:
        if environment.head is None:
            raise EvaluationRefused(f"{environment.repo_id} has no indexed revision")
        return environment.head
    try:
        found = selectors.revision_resolve(environment=environment, ref=ref)
    except selectors.AmbiguousRevision:
        found = None
    if found is None:
        raise EvaluationRefused(f"no single revision of {environment.repo_id} matches {ref!r}")
    return found
