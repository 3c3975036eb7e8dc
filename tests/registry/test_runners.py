"""Both runners end to end against real OpenEnv servers: the local sandbox and a 'Space' reached over HTTP.

Runs go through the real task function in this process (the Celery path is in tests/workers); the
database is committed (transactional) because the run's heartbeat thread writes from its own connection.
"""

from __future__ import annotations

import socket
import threading

import pytest

from registry import services
from registry.conformance import report_problems
from registry.models import Environment, ValidationRun
from registry.services import validation
from tests.conftest import EXAMPLES
from tests.support.envserver import EnvServer
from workers.tasks import validate_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


def env(key: str) -> Environment:
    return Environment.objects.select_related("head").get(key=key)


def validate(environment: Environment, **kwargs) -> ValidationRun:
    kwargs.setdefault("trigger", ValidationRun.Trigger.REQUEST)
    run, _ = validation.validation_run_request(revision=environment.head, **kwargs)
    validate_run(run.pk)
    run.refresh_from_db()
    return run


def statuses(run: ValidationRun) -> dict[str, str]:
    return {r["check_id"]: r["status"] for r in run.report["results"]}


def result(run: ValidationRun, check_id: str) -> dict:
    return next(r for r in run.report["results"] if r["check_id"] == check_id)


# --- local runner -----------------------------------------------------------------------------------------


def test_local_runner_passes_a_good_environment(local_envs):
    run = validate(env("local/guess_number"))
    assert (run.state, run.outcome, run.runner) == ("finished", "pass", "local"), run.report
    assert report_problems(run.report) == []
    assert run.report["target"] == f"local/guess_number@{run.revision.sha}"
    assert run.report["source_digest"] == run.revision.sha
    assert statuses(run)["hub.immutable_versioning"] == "pass"
    startup = result(run, "runtime.startup")
    assert any(line.startswith("net: applied") for line in startup["measured"]["sandbox_isolation"])
    assert result(run, "hub.ws_episode")["measured"]["action_source"] == "validation/runtime.json"
    assert run.failing_checks == [] and run.started_at <= run.finished_at and run.attempts == 1


@pytest.mark.parametrize("name, check_id", [
    ("reward_out_of_range", "runtime.reward_well_formed"),
    ("step_count_frozen", "runtime.state_contract"),
    ("partial_http", "hub.http_mode"),
    ("health_failing", "runtime.startup"),
])
def test_local_runner_fails_broken_environments_on_the_right_check(local_envs, name, check_id):
    run = validate(env(f"broken/{name}"))
    assert run.outcome == "fail", run.report
    assert check_id in run.failing_checks
    assert result(run, check_id)["evidence"] and result(run, check_id)["remediation"]
    if name == "health_failing":  # the sandbox hands over as soon as the app answers; the probe tells why
        assert "the app is up and /health is not healthy" in " ".join(result(run, check_id)["evidence"])
        assert statuses(run)["hub.schema_endpoint"] == "pass"


def test_local_runner_refuses_a_folder_that_changed_since_indexing(local_envs, tmp_path, settings):
    root = tmp_path / "envs"
    pkg = root / "drift"
    pkg.mkdir(parents=True)
    (pkg / "openenv.yaml").write_text("name: drift\n")
    settings.HUB_LOCAL_SOURCES = [f"acme={root}"]
    services.local_sync()
    (pkg / "openenv.yaml").write_text("name: drift\ndescription: edited after indexing\n")
    run = validate(env("acme/drift"))
    assert run.state == "cancelled" and "changed since this revision was indexed" in run.reason


def test_an_uninstallable_package_fails_startup_with_evidence(local_envs, tmp_path, settings):
    pkg = tmp_path / "envs" / "urldep"
    (pkg / "server").mkdir(parents=True)
    (pkg / "openenv.yaml").write_text("name: urldep\napp: server.app:app\n")
    (pkg / "pyproject.toml").write_text(
        '[project]\nname = "urldep"\ndependencies = ["openenv[core] @ git+https://example.com/openenv.git"]\n')
    settings.HUB_LOCAL_SOURCES = [f"acme={tmp_path / 'envs'}"]
    services.local_sync()
    run = validate(env("acme/urldep"))
    assert run.outcome == "fail" and "runtime.startup" in run.failing_checks
    startup = result(run, "runtime.startup")
    assert "URL" in " ".join(startup["evidence"]) or "direct reference" in " ".join(startup["evidence"])
    assert statuses(run)["hub.ws_episode"] == "skip"
    assert statuses(run)["static.manifest"] == "pass"


# --- space runner -----------------------------------------------------------------------------------------


@pytest.fixture
def echo_space(corpus_stub, validation_settings, openenv_python):
    """openenv/echo_example: a Hub Space whose files are examples/envs/echo_env, its app served on 127.0.0.1."""
    files = {p.relative_to(EXAMPLES / "echo_env").as_posix(): p.read_bytes()
             for p in (EXAMPLES / "echo_env").rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    corpus_stub.put_space("openenv/echo_example", files)
    server = EnvServer(EXAMPLES / "echo_env", python=openenv_python)
    server.start()
    try:
        server.wait_ready()
        corpus_stub.update_space("openenv/echo_example", host=server.base_url)
        validation_settings.HUB_PROBE_ALLOWED_HOSTS = ["127.0.0.1"]
        services.space_index_by_id(repo_id="openenv/echo_example")
        yield server
    finally:
        server.stop()


def test_space_runner_probes_the_running_space(echo_space, corpus_stub):
    run = validate(env("openenv/echo_example"), runner="space")
    assert (run.outcome, run.target_url) == ("pass", echo_space.base_url), run.report
    assert result(run, "hub.immutable_versioning")["measured"]["served"] == corpus_stub.head("openenv/echo_example")
    assert result(run, "hub.time_to_first_work")["status"] == "pass"


def test_a_sleeping_space_is_not_woken_by_a_schedule(echo_space, corpus_stub):
    corpus_stub.update_space("openenv/echo_example", runtime_stage="SLEEPING")
    run = validate(env("openenv/echo_example"), runner="space", trigger="schedule", wake=False)
    assert run.state == "cancelled" and run.outcome is None and "sleeping" in run.reason
    assert run.report is None



def test_an_explicit_request_wakes_a_sleeping_space(echo_space, corpus_stub, settings):
    """The Space is really down when the probe starts; its first requests wake it, within the wake budget only."""
    corpus_stub.update_space("openenv/echo_example", runtime_stage="SLEEPING")
    settings.HUB_SANDBOX_STARTUP_S = 1.0  # an awake Space gets one second...
    settings.HUB_PROBE_WAKE_S = 120.0  # ...a sleeping one as long as waking takes
    echo_space.stop()
    asleep = EnvServer(EXAMPLES / "echo_env", python=echo_space.python)  # not started: nothing listens yet
    corpus_stub.update_space("openenv/echo_example", host=asleep.base_url)
    waking = threading.Timer(1.0, asleep.start)
    waking.start()
    try:
        run = validate(env("openenv/echo_example"), runner="space", wake=True)
    finally:
        waking.join()
        asleep.stop()
    assert run.outcome == "pass", run.report
    startup = result(run, "runtime.startup")
    assert startup["measured"]["attempts"] > 1  # it was not up at first


def test_a_building_space_is_waited_for_without_using_attempts(echo_space, corpus_stub, settings):
    corpus_stub.update_space("openenv/echo_example", runtime_stage="BUILDING")
    run, _ = validation.validation_run_request(revision=env("openenv/echo_example").head, trigger="new_revision",
                                               runner="space")
    for _ in range(settings.HUB_VALIDATION_MAX_ATTEMPTS + 1):  # more looks than attempts allow
        assert validate_run(run.pk) == "waiting"
        run.refresh_from_db()
        assert (run.state, run.attempts) == ("queued", 0) and run.reason.startswith("Waiting: the Space is BUILDING")
    corpus_stub.update_space("openenv/echo_example", runtime_stage="RUNNING")  # the build finished
    assert validate_run(run.pk) == "pass"

    corpus_stub.update_space("openenv/echo_example", runtime_stage="APP_STARTING")
    settings.HUB_VALIDATION_SETTLE_MAX_S = 0  # and now it never settles
    run, _ = validation.validation_run_request(revision=env("openenv/echo_example").head, trigger="request",
                                               runner="space")
    assert validate_run(run.pk) == "cancelled"
    run.refresh_from_db()
    assert run.state == "cancelled" and run.reason.startswith("Gave up waiting: the Space is APP_STARTING")


def test_a_paused_space_is_not_probed_even_on_request(echo_space, corpus_stub):
    corpus_stub.update_space("openenv/echo_example", runtime_stage="PAUSED")
    run = validate(env("openenv/echo_example"), runner="space", wake=True)
    assert run.state == "cancelled" and "paused by its owner" in run.reason


def test_a_space_that_moves_during_the_probe_gets_no_verdict(echo_space, corpus_stub, monkeypatch):
    from registry import runners

    real = runners._report

    def report_then_push(*args, **kwargs):
        result = real(*args, **kwargs)
        corpus_stub.put_space("openenv/echo_example", {"openenv.yaml": b"name: echo_env\n"})  # pushed meanwhile
        return result

    monkeypatch.setattr(runners, "_report", report_then_push)
    run = validate(env("openenv/echo_example"), runner="space")
    assert run.state == "cancelled" and "moved from" in run.reason and run.report is None


def test_a_space_in_build_error_fails_with_its_stage(echo_space, corpus_stub):
    corpus_stub.update_space("openenv/echo_example", runtime_stage="BUILD_ERROR")
    run = validate(env("openenv/echo_example"), runner="space")
    assert run.outcome == "fail" and run.failing_checks == ["runtime.startup"]
    assert result(run, "runtime.startup")["evidence"] == ["Hub runtime stage: BUILD_ERROR"]


def test_a_space_serving_another_sha_cannot_vouch_for_this_revision(echo_space, corpus_stub):
    corpus_stub.put_space("openenv/echo_example", {"openenv.yaml": b"name: echo_env\n"})  # a new commit, not indexed
    run = validate(env("openenv/echo_example"), runner="space")
    assert run.state == "cancelled" and "now serves" in run.reason


def test_a_host_outside_the_allowed_ones_is_never_contacted(echo_space, corpus_stub, validation_settings):
    listener = socket.socket()
    listener.bind(("127.0.0.2", 0))
    listener.listen()
    listener.settimeout(0.2)
    knocks = []

    def accept():
        try:
            knocks.append(listener.accept())
        except OSError:
            pass

    thread = threading.Thread(target=accept)
    thread.start()
    corpus_stub.update_space("openenv/echo_example", host=f"http://127.0.0.2:{listener.getsockname()[1]}")
    try:
        run = validate(env("openenv/echo_example"), runner="space")
    finally:
        thread.join()
        listener.close()
    assert knocks == []
    assert run.outcome == "fail" and "runtime.startup" in run.failing_checks
    assert "not allowed" in " ".join(result(run, "runtime.startup")["evidence"]).lower()


def test_a_hub_space_validated_locally_from_its_pinned_snapshot(echo_space, corpus_stub):
    run = validate(env("openenv/echo_example"), runner="local")
    assert (run.runner, run.outcome) == ("local", "pass"), run.report
    assert result(run, "hub.immutable_versioning")["measured"]["how"] == "Hub snapshot pinned to the sha"
    assert corpus_stub.count("resolve", repo_id="openenv/echo_example") > 0


def test_the_probe_never_leaves_a_run_running(local_envs, settings):
    settings.HUB_PROBE_DEADLINE_S = 40.0
    settings.HUB_PROBE_CHECK_TIMEOUT_S = 5.0
    run = validate(env("broken/reset_hangs"))
    assert run.state == "finished" and run.outcome == "fail"
    assert "hub.ws_episode" in run.failing_checks


def test_a_hub_outage_is_retried_with_backoff_then_given_up(corpus_stub, validation_settings):
    services.space_index_by_id(repo_id="openenv/echo_env")
    corpus_stub.inject("info", status=503, times=None, repo_id="openenv/echo_env")
    run, _ = validation.validation_run_request(revision=env("openenv/echo_env").head, trigger="request",
                                               runner="space")
    for attempt, wait in ((1, 60), (2, 120)):
        assert validate_run(run.pk) == "requeued"
        run.refresh_from_db()
        assert (run.state, run.attempts) == ("queued", attempt)
        assert run.reason.startswith(f"Retrying in {wait} s after a transient failure") and "503" in run.reason
    assert validate_run(run.pk) == "error"
    run.refresh_from_db()
    assert (run.state, run.outcome, run.attempts) == ("finished", "error", 3)
    assert run.reason.startswith("Gave up after 3 attempts") and run.report is None
