"""`openenv-hub check`: real OpenEnv servers (a URL), the local sandbox (a folder), and the worker's own
validation of the same package for comparison."""

from __future__ import annotations

import json

import pytest

from registry.conformance import report_problems
from registry.conformance.probe import RUNTIME_CHECK_IDS
from registry.models import Environment
from registry.services import validation
from tests.conftest import EXAMPLES, FIXTURE_ENVS
from tests.support.envserver import EnvServer
from workers.tasks import validate_run

pytestmark = pytest.mark.integration


@pytest.fixture
def echo_server(openenv_python):
    with EnvServer(EXAMPLES / "echo_env", python=openenv_python) as server:
        server.wait_ready()
        yield server


def test_check_url_piped_on_a_terminal_and_as_json(run_cli, run_cli_tty, echo_server):
    url = echo_server.base_url
    ran = run_cli("check", url)
    assert ran.code == 0, ran.both
    assert "\x1b[" not in ran.out and "PASS  runtime.startup" in ran.out and "verdict: PASS" in ran.out
    assert "static.manifest" not in ran.out  # no package at hand: runtime checks only
    assert ran.err == f"checking {url}\n"  # piped: the stages as plain lines, no spinner

    tty = run_cli_tty("check", url)
    assert tty.code == 0, tty.out
    assert "\x1b[32m✓ PASS" in tty.out and "verdict: \x1b[32m✓ PASS" in tty.out
    assert "probing: " in tty.out  # the live progress line (erased as it goes)

    report = json.loads(run_cli("check", url, "--json").out)
    assert report_problems(report) == []  # OpenEnv's report-v2
    assert report["verdict"] == "pass" and report["target"] == url
    ids = [r["check_id"] for r in report["results"]]
    assert set(ids) <= set(RUNTIME_CHECK_IDS) and "hub.ws_episode" in ids


def test_check_with_no_color_on_a_terminal(run_cli_tty, echo_server):
    tty = run_cli_tty("check", echo_server.base_url, env={"NO_COLOR": "1"})
    assert tty.code == 0 and "\x1b[3" not in tty.out and "PASS  hub.ws_episode" in tty.out


def test_check_a_folder_with_a_running_server(run_cli, echo_server):
    report = json.loads(run_cli("check", str(EXAMPLES / "echo_env"), "--url", echo_server.base_url, "--json").out)
    ids = [r["check_id"] for r in report["results"]]
    assert ids[:4] == ["static.manifest", "static.layout", "hub.openenv_dependency", "hub.runtime_plan"]
    assert "hub.immutable_versioning" not in ids and report["verdict"] == "pass"


@pytest.mark.parametrize("args, message", [
    (["check", "tests/cli"], "tests/cli has no openenv.yaml: it is not an OpenEnv package folder."),
    (["check", "no/such/folder"],
     "no/such/folder does not exist: give a package folder or the http(s) URL of a running server."),
    (["check", "ftp://example.org"], "Not a server to check: 'ftp://example.org': only http and https URLs are probed."),
    (["check", "http://user:pw@127.0.0.1:1"],
     "Not a server to check: 'http://user:pw@127.0.0.1:1': URLs with credentials are not probed."),
    (["check", "http://"], "Not a server to check: 'http://' names no host."),
    (["check", "http://127.0.0.1:99999"], "Not a server to check: 'http://127.0.0.1:99999' is not a valid URL "
                                          "(Port out of range 0-65535)."),
])
def test_what_cannot_be_checked_exits_2(run_cli, args, message):
    ran = run_cli(*args)
    assert (ran.code, ran.out, ran.err) == (2, "", f"openenv-hub: {message}\n")


def test_a_broken_package_fails_with_its_failing_check_and_remediation(run_cli, openenv_python):
    ran = run_cli("check", str(FIXTURE_ENVS / "reward_out_of_range"))
    assert ran.code == 1, ran.both
    assert "verdict: FAIL (1 failing: runtime.reward_well_formed)" in ran.out
    line = next(line for line in ran.out.splitlines() if "runtime.reward_well_formed" in line and "FAIL" in line)
    assert line.startswith("  FAIL  runtime.reward_well_formed")
    assert "fix: " in ran.out.split(line, 1)[1].split("\n  PASS", 1)[0]  # the remediation under it
    assert "installing the package's dependencies" in ran.err and "starting the server" in ran.err


@pytest.mark.django_db(transaction=True)
def test_check_gives_the_report_the_worker_gives(run_cli, local_envs):
    """The same package validated by the worker's local runner and by `openenv-hub check DIR`."""
    env = Environment.objects.select_related("head").get(key="broken/reward_out_of_range")
    run, _ = validation.validation_run_request(revision=env.head, trigger="request", runner="local")
    validate_run(run.pk)
    run.refresh_from_db()
    assert run.outcome == "fail", run.report

    ran = run_cli("check", str(FIXTURE_ENVS / "reward_out_of_range"), "--json")
    assert ran.code == 1, ran.err
    mine = json.loads(ran.out)
    assert report_problems(mine) == []

    def shape(report):
        return [(r["check_id"], r["status"], r["remediation"]) for r in report["results"]]

    assert shape(mine) == shape(run.report)
    assert mine["verdict"] == run.report["verdict"] == "fail"
    assert mine["source_digest"] == run.report["source_digest"] == env.head.sha  # the same revision
    assert (mine["policy_version"], mine["levels_run"]) == (run.report["policy_version"], run.report["levels_run"])
