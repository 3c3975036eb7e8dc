"""Verdicts in the API and the catalog, the report page, staff re-runs, and the validate command."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from registry.models import ValidationRun
from registry.services import validation

pytestmark = pytest.mark.django_db

REPORT = {
    "report_schema_version": "2", "target": "local/alpha@x", "source_digest": "x", "signature": "openenv.yaml",
    "manifest": None, "policy_version": "hub-1", "lane": "hub", "levels_run": [1, 2], "verdict": "fail",
    "results": [
        {"check_id": "static.manifest", "status": "pass", "measured": {}, "evidence": ["name: alpha"],
         "remediation": None, "duration_s": 0.001},
        {"check_id": "runtime.reward_well_formed", "status": "fail", "measured": {"rewards": [5.0]},
         "evidence": ["step 1: reward 5.0 outside [0.0, 1.0] <script>x</script>"],
         "remediation": "Keep rewards inside the declared range.", "duration_s": 0.002},
    ],
}


@pytest.fixture
def client():
    return Client(HTTP_HOST="localhost")


@pytest.fixture
def env(tiny_envs):
    return tiny_envs


def finished(env, outcome="fail", report=REPORT) -> ValidationRun:
    run, _ = validation.validation_run_request(revision=env.head, trigger="request")
    validation.validation_run_start(run_id=run.pk)
    validation.validation_run_finish(run_id=run.pk, outcome=outcome, report=report)
    run.refresh_from_db()
    return run


def test_verdict_is_null_before_any_run(client, env):
    assert client.get("/api/v1/environments/local/alpha/").json()["verdict"] is None
    response = client.get("/api/v1/environments/local/alpha/validations/latest/")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    # A queued run is not a verdict.
    validation.validation_run_request(revision=env.head, trigger="request")
    assert client.get("/api/v1/environments/local/alpha/").json()["verdict"] is None


def test_verdict_and_latest_report(client, env):
    run = finished(env)
    body = client.get("/api/v1/environments/local/alpha/").json()
    assert body["verdict"] == {
        "outcome": "fail", "run_id": run.pk, "revision": env.head.sha,
        "finished_at": body["verdict"]["finished_at"], "failing_checks": ["runtime.reward_well_formed"],
    }
    assert body["verdict"]["finished_at"].startswith(str(run.finished_at.year))
    latest = client.get("/api/v1/environments/local/alpha/validations/latest/").json()
    assert latest["id"] == run.pk and latest["report"] == REPORT and latest["state"] == "finished"
    listed = {r["id"]: r for r in client.get("/api/v1/environments/?source=local").json()["results"]}
    assert listed["local/alpha"]["verdict"]["outcome"] == "fail" and listed["local/beta"]["verdict"] is None
    runs = client.get("/api/v1/environments/local/alpha/validations/").json()
    assert [r["id"] for r in runs["results"]] == [run.pk] and "report" not in runs["results"][0]
    assert client.get(f"/api/v1/environments/local/alpha/validations/{run.pk}/").json()["report"] == REPORT
    assert client.get(f"/api/v1/environments/local/beta/validations/{run.pk}/").status_code == 404


def test_the_head_revisions_verdict_wins(client, env, settings):
    from pathlib import Path

    from registry import services

    old_revision = env.head
    old_run, _ = validation.validation_run_request(revision=old_revision, trigger="request")
    validation.validation_run_start(run_id=old_run.pk)
    Path(env.local_path, "openenv.yaml").write_text("name: alpha\ndescription: v2\n")
    services.local_sync()
    env.refresh_from_db()
    assert env.head != old_revision
    # Until the new head has a result, the verdict is the older revision's, and says which revision it is.
    validation.validation_run_finish(run_id=old_run.pk, outcome="pass", report=REPORT)
    verdict = client.get("/api/v1/environments/local/alpha/").json()["verdict"]
    assert (verdict["run_id"], verdict["revision"]) == (old_run.pk, old_revision.sha)
    head_run = finished(env, "fail")
    # An older revision's run finishing later does not displace the head's verdict.
    late, _ = validation.validation_run_request(revision=old_revision, trigger="request")
    validation.validation_run_start(run_id=late.pk)
    validation.validation_run_finish(run_id=late.pk, outcome="pass", report=REPORT)
    verdict = client.get("/api/v1/environments/local/alpha/").json()["verdict"]
    assert (verdict["run_id"], verdict["revision"], verdict["outcome"]) == (head_run.pk, env.head.sha, "fail")
    page = client.get("/environments/local/alpha/").content.decode()
    assert "an earlier revision" not in page


def test_catalog_and_report_page(client, env):
    run = finished(env)
    home = client.get("/environments/").content.decode()
    assert 'class="verdict verdict-fail"' in home and "not validated" in home  # alpha failed, beta never ran
    page = client.get("/environments/local/alpha/").content.decode()
    assert "Verdict <strong>failing</strong>" in page and "runtime.reward_well_formed" in page
    report = client.get(f"/environments/local/alpha/validations/{run.pk}/").content.decode()
    assert "static.manifest" in report and "runtime.reward_well_formed" in report
    assert "Keep rewards inside the declared range." in report
    assert "reward 5.0 outside [0.0, 1.0]" in report and "<script>x</script>" not in report
    assert "status-fail" in report and "status-pass" in report
    assert client.get("/environments/local/beta/validations/%d/" % run.pk).status_code == 404


def test_only_staff_request_runs_of_local_environments(client, env):
    anonymous = client.post("/api/v1/environments/local/alpha/validations/", {})
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"].startswith("Bearer")
    User.objects.create_user("user", password="pw")
    client.login(username="user", password="pw")
    assert client.post("/api/v1/environments/local/alpha/validations/", {}).status_code == 403
    staff = User.objects.create_user("staff", password="pw", is_staff=True)
    client.login(username="staff", password="pw")
    response = client.post("/api/v1/environments/local/alpha/validations/", {"runner": "local"},
                           content_type="application/json")
    assert response.status_code == 202
    run = ValidationRun.objects.get(pk=response.json()["id"])
    assert (run.state, run.trigger, run.wake, run.requested_by) == ("queued", "request", True, staff)
    again = client.post("/api/v1/environments/local/alpha/validations/", {}, content_type="application/json")
    assert again.status_code == 200 and again.json()["id"] == run.pk  # one live run per revision
    bad = client.post("/api/v1/environments/local/alpha/validations/", {"runner": "cloud"},
                      content_type="application/json")
    assert bad.status_code == 400 and "runner" in bad.json()["error"]["detail"]


def test_staff_button_on_the_environment_page(client, env):
    User.objects.create_user("staff", password="pw", is_staff=True)
    client.login(username="staff", password="pw")
    assert "Validate now" in client.get("/environments/local/alpha/").content.decode()
    response = client.post("/environments/local/alpha/validate/", follow=True)
    assert "queued" in response.content.decode()
    assert ValidationRun.objects.filter(environment=env, state="queued").count() == 1
    client.logout()
    assert "Validate now" not in client.get("/environments/local/alpha/").content.decode()
    assert client.post("/environments/local/alpha/validate/").status_code == 302  # to the login page
    assert ValidationRun.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_validate_command_inline(local_envs, capsys):
    with pytest.raises(SystemExit) as exit_info:
        call_command("validate", "broken/no_schema", "--inline")
    assert exit_info.value.code == 1
    out = capsys.readouterr().out
    assert "verdict: fail" in out and "hub.schema_endpoint" in out and "GET /schema" in out and "fix:" in out
    call_command("validate", "local/echo_env", "--inline")
    assert "verdict: pass" in capsys.readouterr().out


def test_validate_command_errors(env):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no environment"):
        call_command("validate", "nobody/nothing")
    call_command("validate", "local/alpha")
    assert ValidationRun.objects.filter(environment=env, state="queued").exists()


def test_admin_lists_runs_and_queues_validations(client, env):
    User.objects.create_superuser("admin", password="pw")
    client.login(username="admin", password="pw")
    response = client.post("/admin/registry/environment/", {
        "action": "validate_head", "_selected_action": [env.pk]}, follow=True)
    assert "1 validation(s) queued." in response.content.decode()
    run = ValidationRun.objects.get()
    assert client.get("/admin/registry/validationrun/").status_code == 200
    response = client.post("/admin/registry/validationrun/", {"action": "cancel", "_selected_action": [run.pk]},
                           follow=True)
    assert "1 run(s) cancelled." in response.content.decode()
    run.refresh_from_db()
    assert run.state == "cancelled" and run.reason == "Cancelled by admin."


@pytest.mark.django_db(transaction=True)
def test_validate_command_exit_codes(tiny_envs, capsys):
    import threading

    from django.core.management.base import CommandError
    from django.db import connection

    for bad in ("nan", "inf", "0", "-5"):
        with pytest.raises(CommandError, match="positive number of seconds"):
            call_command("validate", "local/alpha", "--wait", "--timeout", bad)

    def cancel_when_queued():
        try:
            for _ in range(100):
                run = ValidationRun.objects.filter(state="queued").first()
                if run and validation.validation_run_cancel(run_id=run.pk, reason="stopped by an operator"):
                    return
                threading.Event().wait(0.1)
        finally:
            connection.close()

    canceller = threading.Thread(target=cancel_when_queued)
    canceller.start()
    with pytest.raises(SystemExit) as exit_info:
        call_command("validate", "local/alpha", "--wait", "--timeout", "30")
    canceller.join()
    assert exit_info.value.code == 2  # no verdict is not a pass
    assert "cancelled: stopped by an operator" in capsys.readouterr().out
