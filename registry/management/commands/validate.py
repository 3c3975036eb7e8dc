import argparse
import math
import time

from django.core.management.base import BaseCommand, CommandError

from registry import selectors
from registry.models import ValidationRun
from registry.services import validation


def _seconds(value: str) -> float:
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, not {value!r}")
    return seconds


class Command(BaseCommand):
    help = ("Request a conformance validation of an environment's head revision; --wait prints the verdict "
            "(exit status 1 on fail or error, 2 when the run was cancelled and gave no verdict).")

    def add_arguments(self, parser):
        parser.add_argument("repo_id", help="owner/name")
        parser.add_argument("--runner", choices=ValidationRun.Runner.values,
                            help="space: probe the running Space; local: install and run it in the sandbox here.")
        parser.add_argument("--wait", action="store_true", help="Wait for the run to end and print the verdict.")
        parser.add_argument("--timeout", type=_seconds, default=1800, help="Seconds --wait waits (default 1800).")
        parser.add_argument("--inline", action="store_true",
                            help="Run it in this process instead of waiting for a worker (implies --wait).")
        parser.add_argument("--no-wake", action="store_true", help="Report a sleeping Space as sleeping instead of waking it.")

    def handle(self, *args, repo_id: str, runner=None, wait=False, timeout=1800.0, inline=False, no_wake=False, **options):
        owner, _, name = repo_id.partition("/")
        env = selectors.environment_get(owner=owner, name=name) if owner and name else None
        if env is None:
            raise CommandError(f"no environment {repo_id!r} in the index (run sync_hub or index_space first)")
        if env.head is None:
            raise CommandError(f"{env.repo_id} has no indexed revision to validate")
        run, created = validation.validation_run_request(
            revision=env.head, trigger=ValidationRun.Trigger.REQUEST, runner=runner, wake=not no_wake)
        self.stdout.write(f"validation #{run.pk} of {env.repo_id}@{env.head.sha[:12]} "
                          f"({run.runner} runner) {'queued' if created else 'already ' + run.state}")
        if inline:
            from workers.tasks import validate_run

            validate_run(run.pk)
        elif not wait:
            return
        deadline = time.monotonic() + timeout
        while True:
            run.refresh_from_db()
            if run.state in (ValidationRun.State.FINISHED, ValidationRun.State.CANCELLED):
                break
            if time.monotonic() > deadline:
                raise CommandError(f"validation #{run.pk} is still {run.state} after {timeout:.0f} s")
            time.sleep(1)
        self._print(run)
        if run.state == ValidationRun.State.CANCELLED:
            raise SystemExit(2)
        if run.outcome in (ValidationRun.Outcome.FAIL, ValidationRun.Outcome.ERROR):
            raise SystemExit(1)

    def _print(self, run: ValidationRun) -> None:
        if run.state == ValidationRun.State.CANCELLED:
            self.stdout.write(f"cancelled: {run.reason}")
            return
        self.stdout.write(f"verdict: {run.outcome}" + (f" ({run.reason})" if run.reason else ""))
        for result in (run.report or {}).get("results", []):
            if result.get("status") in ("fail", "error"):
                self.stdout.write(f"  {result['status']:5} {result['check_id']}")
                for line in result.get("evidence", [])[:5]:
                    self.stdout.write(f"        {line}")
                if result.get("remediation"):
                    self.stdout.write(f"        fix: {result['remediation']}")
