"""Validation runs: request, start, heartbeat, finish, cancel, reap. Every state change is compare-and-set.

The row is written before its task is sent (after commit), the task gets only
the primary key, and a run moves queued → running → finished | cancelled by
`filter(pk=…, state=A).update(state=B)`: whoever changes exactly one row owns
the transition; everyone else does nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from registry.conformance import POLICY_VERSION, VALIDATOR_VERSION
from registry.conformance.report import CheckResult, build_report, with_property_order
from registry.identity import HubUser
from registry.models import Environment, Revision, ValidationRun
from registry.services import runs
from registry.services.catalog import environment_catalog_refresh
from registry.services.runs import RunNotRunning  # noqa: F401 - the tasks catch it from here

logger = logging.getLogger(__name__)

State, Outcome = ValidationRun.State, ValidationRun.Outcome


def default_runner(environment: Environment) -> str:
    """Local sources run in the sandbox; Hub Spaces are probed where they run, unless configured otherwise."""
    if environment.source == Environment.Source.LOCAL:
        return ValidationRun.Runner.LOCAL
    return settings.HUB_VALIDATION_RUNNER


def _finish_error(*, run_id: int, reason: str, attempt: int | None = None, stale_before=None) -> bool:
    return validation_run_finish(run_id=run_id, outcome=Outcome.ERROR, report=None, reason=reason, attempt=attempt,
                                 stale_before=stale_before)


# The task, by its stable name: services never import workers (which import services).
VALIDATION = runs.RunKind(label="validation", model=ValidationRun, task="registry.validate_run", queue="validation",
                          finish_error=_finish_error)


class RerunTooSoon(Exception):
    """The revision was validated moments ago; `wait_s` says when asking again will be accepted."""

    def __init__(self, wait_s: float):
        super().__init__(f"this revision was validated less than a cooldown ago; ask again in {wait_s:.0f} s")
        self.wait_s = wait_s


def validation_run_request(*, revision: Revision, trigger: str, runner: str | None = None, wake: bool = False,
                           requested_by=None, cooldown_s: float = 0) -> tuple[ValidationRun, bool]:
    """Queue a validation of `revision`, or return the live one. Returns (run, created).

    At most one live run per revision and validator version (a database
    constraint); the task is sent only once the row is committed. With
    `cooldown_s`, a revision whose last run finished less than that long ago
    is not run again (RerunTooSoon); a live run is still returned.
    """
    environment = revision.environment
    runner = runner or default_runner(environment)
    if runner not in ValidationRun.Runner.values:
        raise ValueError(f"unknown runner {runner!r}")
    live = ValidationRun.objects.filter(revision=revision, validator_version=VALIDATOR_VERSION,
                                        state__in=ValidationRun.LIVE_STATES)
    existing = live.first()
    if existing:
        return existing, False
    if cooldown_s > 0:
        last = (ValidationRun.objects.filter(revision=revision, finished_at__isnull=False)
                .order_by("-finished_at").values_list("finished_at", flat=True).first())
        if last is not None and (wait := cooldown_s - (timezone.now() - last).total_seconds()) > 0:
            raise RerunTooSoon(wait)
    hub_account = requested_by.name if isinstance(requested_by, HubUser) else ""
    try:
        with transaction.atomic():
            run = ValidationRun.objects.create(
                environment=environment, revision=revision, validator_version=VALIDATOR_VERSION,
                policy_version=POLICY_VERSION, runner=runner, trigger=trigger, wake=wake,
                requested_by=requested_by if getattr(requested_by, "pk", None) else None,
                requested_by_hub=hub_account,
            )
            runs.enqueue(VALIDATION, run.pk)
    except IntegrityError:
        return live.get(), False
    logger.info("validation: queued #%d for %s (%s, %s)", run.pk, revision, runner, trigger)
    return run, True


def validation_run_start(*, run_id: int, worker: str = "") -> ValidationRun | None:
    """queued → running (registry.services.runs.start)."""
    return runs.start(VALIDATION, run_id, worker=worker)


def validation_run_heartbeat(*, run_id: int, attempt: int | None = None) -> None:
    """Prove the worker still works on the run (registry.services.runs.heartbeat)."""
    runs.heartbeat(VALIDATION, run_id, attempt=attempt)


def schema_digest(observed: dict | None) -> str:
    """sha256 of the action and observation schemas a server showed ("" when it showed neither): what an
    evaluation measured on, so a result can tell when the environment changed under it."""
    schemas = (observed or {}).get("schemas") if isinstance(observed, dict) else None
    if not isinstance(schemas, dict):
        return ""
    picked = {key: schemas.get(key) for key in ("action", "observation")}
    if not any(picked.values()):
        return ""
    return hashlib.sha256(json.dumps(picked, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def validation_run_finish(*, run_id: int, outcome: str, report: dict | None, reason: str = "",
                          target_url: str = "", attempt: int | None = None, stale_before=None,
                          observed: dict | None = None) -> bool:
    """running → finished with an outcome, the report and what the server showed (`observed`: its schemas keep
    their fields' declared order, which the database would not), and the environment's catalog summary follows.
    False when the run was no longer running (or, given `attempt`, is
    in a later attempt: a superseded worker's verdict is dropped; given `stale_before`, it beat since)."""
    failing = [
        r["check_id"] for r in (report or {}).get("results", [])
        if r.get("status") in ("fail", "error")
    ]
    with transaction.atomic():
        finished = bool(runs.running(VALIDATION, run_id, attempt, stale_before=stale_before).update(
            state=State.FINISHED, outcome=outcome, report=report, failing_checks=failing, reason=reason[:2000],
            target_url=target_url[:500], finished_at=timezone.now(), observed=with_property_order(observed),
            schema_digest=schema_digest(observed),
        ))
        if finished:
            run = ValidationRun.objects.select_related("environment").get(pk=run_id)
            environment_catalog_refresh(environment_id=run.environment_id)
            from registry.services.evaluation import baseline_after_pass

            baseline_after_pass(run)
    return finished


_CHECK_RESULT_FIELDS = ("check_id", "status", "measured", "evidence", "remediation", "duration_s")


def _check_result(result: dict) -> CheckResult:
    """A report-v2 check result (a dict, as stored) as the CheckResult it was made from."""
    return CheckResult(**{key: result[key] for key in _CHECK_RESULT_FIELDS if key in result})


def validation_report_amend(*, run_id: int, results: list[dict]) -> bool:
    """Add check results measured after the run (a baseline's semantic checks) to its report, rebuilt with the
    verdict they imply, and let the catalog follow. A result for a check already in the report replaces it.
    False when the run is not finished with a report."""
    with transaction.atomic():
        run = ValidationRun.objects.select_for_update().filter(
            pk=run_id, state=State.FINISHED, report__isnull=False).first()
        if run is None:
            return False
        added = [_check_result(r) for r in results]
        ids = {r.check_id for r in added}
        kept = [_check_result(r) for r in run.report.get("results", []) if r.get("check_id") not in ids]
        report = build_report(results=[*kept, *added], target=run.report.get("target", ""),
                              source_digest=run.report.get("source_digest", ""), manifest=run.report.get("manifest"))
        failing = [r["check_id"] for r in report["results"] if r.get("status") in ("fail", "error")]
        ValidationRun.objects.filter(pk=run.pk).update(report=report, outcome=report["verdict"],
                                                       failing_checks=failing)
        environment_catalog_refresh(environment_id=run.environment_id)
    return True


def validation_run_cancel(*, run_id: int, reason: str, attempt: int | None = None) -> bool:
    """queued or running → cancelled (registry.services.runs.cancel)."""
    return runs.cancel(VALIDATION, run_id, reason=reason, attempt=attempt)


def validation_run_requeue(*, run_id: int, reason: str, countdown: float = 0, attempt: int | None = None,
                           refund_attempt: bool = False, stale_before=None) -> bool:
    """running → queued for a transient failure of ours (registry.services.runs.requeue)."""
    return runs.requeue(VALIDATION, run_id, reason=reason, countdown=countdown, attempt=attempt,
                        refund_attempt=refund_attempt, stale_before=stale_before)


def validation_run_reap_one(*, run_id: int, attempt: int, stale_before, worker: str = "",
                            max_attempts: int | None = None) -> str | None:
    """End one run judged dead (registry.services.runs.reap_one)."""
    return runs.reap_one(VALIDATION, run_id, attempt=attempt, stale_before=stale_before, worker=worker,
                         max_attempts=max_attempts)


def validation_runs_reap(*, stale_after_s: float | None = None, max_attempts: int | None = None) -> dict[str, int]:
    """End validation runs whose worker died, and send the messages that never left (registry.services.runs.reap)."""
    return runs.reap(VALIDATION, stale_after_s=stale_after_s, max_attempts=max_attempts)


def validation_reprobe_schedule(*, older_than_s: float | None = None, limit: int = 500) -> int:
    """Queue scheduled re-probes of active environments whose latest result is older than the interval.

    Scheduled runs never wake a sleeping Space (the runner reports it as sleeping instead).
    """
    older_than_s = settings.HUB_VALIDATION_REPROBE_S if older_than_s is None else older_than_s
    cutoff = timezone.now() - timedelta(seconds=older_than_s)
    envs = (
        Environment.objects.filter(status=Environment.Status.ACTIVE, head__isnull=False)
        .exclude(source=Environment.Source.CATALOG)  # imported entries: no code of theirs runs here
        .exclude(validation_runs__queued_at__gte=cutoff)
        .select_related("head")
        .order_by("key")[:limit]
    )
    queued = 0
    for env in envs:
        _, created = validation_run_request(revision=env.head, trigger=ValidationRun.Trigger.SCHEDULE)
        queued += created
    return queued
