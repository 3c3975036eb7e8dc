"""The probe against real OpenEnv servers: the examples pass, each broken fixture fails where it is broken.

Every server is started at once (``python -m uvicorn server.app:app`` from
its package, see tests/support/envserver.py), probed from a thread of its
own, and stopped before any assertion runs. ``echo_env`` is served on a Unix
socket (``--uds``) and probed without waiting for it first, so the probe's
own startup wait and time-to-first-work are exercised too. Needs an
interpreter with openenv 0.10.0 (``OPENENV_PYTHON``); skipped without one.
"""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from registry import conformance as cf
from registry import manifest as mf
from tests.support.envserver import EnvServer, interpreter

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
GOOD = {name: REPO / "examples" / "envs" / name for name in ("echo_env", "guess_number", "mcp_calculator")}
BROKEN_NAMES = (
    "no_schema", "reward_out_of_range", "step_count_frozen", "health_failing", "bad_ws_envelope",
    "step_crashes", "reset_hangs", "partial_http", "reserved_tool_name", "invalid_observation",
)
BROKEN = {name: REPO / "tests" / "fixtures" / "envs" / name for name in BROKEN_NAMES}
UDS_ENV = "echo_env"
ALLOWED = ("127.0.0.1", "localhost")
# Servers boot in parallel on a shared machine (importing openenv costs ~7 s of CPU each): the
# time-to-first-work budget is widened so load on the test machine does not turn into a warn.
CONFIG = cf.ProbeConfig(check_timeout_s=10, deadline_s=150, startup_timeout_s=120, time_to_first_work_budget_s=150)
HANG_CONFIG = cf.ProbeConfig(check_timeout_s=3, deadline_s=30, startup_timeout_s=60)

# check id -> evidence substring, for the check each fixture breaks; and the
# checks that may be skipped because the broken one left nothing to grade.
EXPECTED_FAILURES = {
    "no_schema": ({"hub.schema_endpoint": 'GET /schema -> 404 {"detail":"Not Found"}'},
                  {"runtime.observation_schema", "runtime.reward_well_formed", "runtime.state_contract"}),
    "reward_out_of_range": ({"runtime.reward_well_formed": "step 1: reward 5.0 outside [0.0, 1.0]"}, set()),
    "step_count_frozen": ({"runtime.state_contract": "state after step 1: step_count 0, expected 1"}, set()),
    "health_failing": ({"runtime.startup": 'GET /health -> 503 {"status":"unhealthy"}'}, set()),
    "bad_ws_envelope": ({"hub.ws_episode": "reset: reply type 'obs', expected 'observation'"}, set()),
    "step_crashes": ({"hub.ws_episode": "error frame EXECUTION_ERROR: echo backend crashed"},
                     {"runtime.observation_schema", "runtime.reward_well_formed", "runtime.state_contract"}),
    "reset_hangs": ({"hub.ws_episode": "no reply within 3.0 s"},
                    {"runtime.observation_schema", "runtime.reward_well_formed", "runtime.state_contract",
                     "hub.invalid_action", "hub.time_to_first_work"}),
    "partial_http": ({"hub.http_mode": "inconsistent: /reset served but /step, /state absent"}, set()),
    "reserved_tool_name": ({"hub.mcp_tools": "tool 'step' uses a reserved name",
                            "runtime.tool_declaration_accuracy": "listed by /mcp but not declared: ['step']"}, set()),
    "invalid_observation": ({"runtime.observation_schema": "step 1: message_length: '5 chars' is not of type 'integer'"},
                            set()),
}


class Cancel(Exception):
    pass


def package_inputs(folder: Path) -> dict:
    """What the index would hold for the package: manifest, problems, full listing, requirement, plan."""
    _, manifest, problems = mf.parse_manifest((folder / "openenv.yaml").read_bytes())
    _, requirement, _ = mf.parse_pyproject((folder / "pyproject.toml").read_bytes())
    files = [
        {"path": p.relative_to(folder).as_posix(), "size": p.stat().st_size}
        for p in sorted(folder.rglob("*")) if p.is_file() and "__pycache__" not in p.parts
    ]
    plan = folder / "validation" / "runtime.json"
    return {
        "manifest": manifest, "manifest_problems": [p.message for p in problems], "files": files,
        "openenv_requirement": requirement, "runtime_plan": plan.read_bytes() if plan.is_file() else None,
    }


def probe(server: EnvServer, config: cf.ProbeConfig, **extra) -> tuple[dict, float]:
    started = time.monotonic()
    report = cf.run_validation(
        cf.ProbeTarget(server.base_url, uds=server.uds, allowed_hosts=ALLOWED),
        **package_inputs(server.package_dir),
        source={"sha": "c" * 40, "repo_id": f"test/{server.name}", "runner": "local"},
        config=config, started_at=server.started_at, **extra,
    )
    return report, time.monotonic() - started


def probe_one(server: EnvServer) -> dict:
    """Everything the tests look at for one server; a server that does not boot is reported, not raised."""
    outcome: dict = {}
    try:
        if server.name != UDS_ENV:
            server.wait_ready()
        if server.name == "mcp_calculator":
            # Cancel mid-session first; the full run afterwards proves the session slot was given back.
            def cancel_at_invalid_action(check_id):
                if check_id == "hub.invalid_action":
                    raise Cancel(check_id)
            try:
                probe(server, CONFIG, on_progress=cancel_at_invalid_action)
            except Cancel as exc:
                outcome["cancelled"] = exc
        progress: list[str] = []
        outcome["report"], outcome["seconds"] = probe(
            server, HANG_CONFIG if server.name == "reset_hangs" else CONFIG, on_progress=progress.append,
        )
        outcome["progress"] = progress
        if server.name == "guess_number":
            outcome["deadline_report"], outcome["deadline_seconds"] = probe(
                server, cf.ProbeConfig(deadline_s=0.05, check_timeout_s=5),
            )
    except Exception as exc:  # noqa: BLE001 - shown by the test of this environment
        outcome["problem"] = f"{type(exc).__name__}: {exc}\n{server.log_tail()}"
    return outcome


@pytest.fixture(scope="module")
def probed():
    python, why = interpreter()
    if python is None:
        pytest.skip(why)
    servers = {name: EnvServer(folder, python=python, uds=name == UDS_ENV) for name, folder in {**GOOD, **BROKEN}.items()}
    started = time.monotonic()
    try:
        for server in servers.values():
            server.start()
        with ThreadPoolExecutor(max_workers=len(servers)) as pool:
            futures = {name: pool.submit(probe_one, server) for name, server in servers.items()}
            outcomes = {name: future.result() for name, future in futures.items()}
    finally:
        for server in servers.values():
            server.request_stop()
        for server in servers.values():
            server.stop()
    outcomes["_seconds"] = time.monotonic() - started
    return outcomes


def outcome_of(probed, name) -> dict:
    outcome = probed[name]
    assert "problem" not in outcome, outcome["problem"]
    return outcome


def statuses(report) -> dict[str, str]:
    return {r["check_id"]: r["status"] for r in report["results"]}


def evidence(report, check_id) -> str:
    return " | ".join(next(r for r in report["results"] if r["check_id"] == check_id)["evidence"])


@pytest.mark.parametrize("name", [*GOOD, *BROKEN])
def test_reports_are_valid_report_v2(probed, name):
    report = outcome_of(probed, name)["report"]
    assert cf.report_problems(report) == []
    assert report["target"] == f"test/{name}@" + "c" * 40 and report["source_digest"] == "c" * 40
    assert "error" not in statuses(report).values(), report["results"]


@pytest.mark.parametrize("name", GOOD)
def test_good_environments_pass(probed, name):
    outcome = outcome_of(probed, name)
    report = outcome["report"]
    assert report["verdict"] == "pass", [r for r in report["results"] if r["status"] != "pass"]
    assert set(statuses(report).values()) == {"pass"}
    assert report["levels_run"] == [1, 2]
    is_mcp = name == "mcp_calculator"
    assert ("hub.mcp_tools" in statuses(report)) is is_mcp  # not applicable, so not reported, for the others
    assert ("runtime.tool_declaration_accuracy" in statuses(report)) is is_mcp
    results = {r["check_id"]: r for r in report["results"]}
    episode = results["hub.ws_episode"]["measured"]
    assert episode["action_source"] == ("synthesized from /schema action" if name == "echo_env" else "validation/runtime.json")
    assert episode["steps_played"] >= 3 and episode["step_latency_s"]["p95"] is not None
    ttfw = results["hub.time_to_first_work"]["measured"]
    assert ttfw["origin"] == "process_start" and 0 < ttfw["time_to_healthy_s"] <= ttfw["time_to_first_reset_s"]
    assert outcome["progress"][0] == "static.manifest" and outcome["progress"][-1] == "hub.time_to_first_work"
    assert outcome["seconds"] < CONFIG.deadline_s


def test_guess_number_plays_the_plan_to_the_end(probed):
    report = outcome_of(probed, "guess_number")["report"]
    results = {r["check_id"]: r for r in report["results"]}
    assert results["hub.ws_episode"]["measured"]["done"] is True
    assert results["runtime.reward_well_formed"]["measured"]["rewards"] == [None, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert results["runtime.reward_well_formed"]["measured"]["range_source"] == "validation.reward.range"
    assert report["manifest"]["manifest_schema_version"] == "2"  # the declared block, normalized


def test_the_probe_works_over_a_unix_socket(probed):
    report = outcome_of(probed, UDS_ENV)["report"]
    startup = next(r for r in report["results"] if r["check_id"] == "runtime.startup")
    assert startup["measured"]["transport"] == "uds" and report["verdict"] == "pass"
    assert startup["measured"]["validator_version"] == cf.VALIDATOR_VERSION


@pytest.mark.parametrize("name", BROKEN)
def test_broken_environments_fail_where_they_are_broken(probed, name):
    report = outcome_of(probed, name)["report"]
    failures, may_skip = EXPECTED_FAILURES[name]
    found = statuses(report)
    assert report["verdict"] == "fail"
    for check_id, text in failures.items():
        assert found[check_id] == "fail", (check_id, found)
        assert text in evidence(report, check_id)
        assert next(r for r in report["results"] if r["check_id"] == check_id)["remediation"]
    others = {c: s for c, s in found.items() if c not in failures}
    assert {c for c, s in others.items() if s == "skip"} <= may_skip, others
    assert {c for c, s in others.items() if s not in ("pass", "skip")} == set(), others


def test_reset_hangs_ends_within_its_deadline(probed):
    outcome = outcome_of(probed, "reset_hangs")
    assert outcome["seconds"] < HANG_CONFIG.deadline_s
    report = outcome["report"]
    text = evidence(report, "hub.ws_episode")
    assert '"type": "reset"' in text and "no reply within 3.0 s" in text  # what was sent, what came back
    assert "unmet dependency: hub.ws_episode" in evidence(report, "hub.invalid_action")


def test_a_run_past_its_deadline_reports_errors(probed):
    outcome = outcome_of(probed, "guess_number")
    report = outcome["deadline_report"]
    assert outcome["deadline_seconds"] < 10
    late = [r for r in report["results"] if r["status"] == "error"]
    assert late and all("deadline" in " ".join(r["evidence"]) for r in late)
    assert report["verdict"] == "fail" and cf.report_problems(report) == []


def test_cancelling_propagates_and_releases_the_session(probed):
    outcome = outcome_of(probed, "mcp_calculator")
    assert isinstance(outcome["cancelled"], Cancel) and str(outcome["cancelled"]) == "hub.invalid_action"
    assert outcome["report"]["verdict"] == "pass"  # the next run got the single /ws session


def test_a_host_outside_the_allowed_ones_is_refused_without_connecting():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.3)
        port = listener.getsockname()[1]
        report = cf.run_validation(
            cf.ProbeTarget(f"http://localhost:{port}", allowed_hosts=("127.0.0.1", "*.hf.space")),
            manifest={"name": "x"}, files=[], openenv_requirement="", runtime_plan=None, source={"runner": "space"},
        )
        with pytest.raises(TimeoutError):
            listener.accept()[0].close()  # nobody knocked
    results = {r["check_id"]: r for r in report["results"]}
    assert results["runtime.startup"]["status"] == "error"
    assert "host 'localhost' is not allowed" in results["runtime.startup"]["evidence"][0]
    assert "no connection was made" in results["runtime.startup"]["evidence"][0]
    assert all(r["status"] == "skip" for c, r in results.items() if c.startswith(("hub.ws", "hub.mcp", "runtime.obs")))
    assert report["verdict"] == "fail"
    with pytest.raises(cf.HostNotAllowed):
        cf.ProbeClient("https://evil.example", allowed_hosts=("*.hf.space",))
