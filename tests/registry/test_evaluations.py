"""Evaluation results: stored whole or refused, statistics computed by the hub, stale when the environment changed,
ranked with their intervals on the page and in the API, and the run state machine shared with validations."""

from __future__ import annotations

import json
import math
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone

from registry import evalstats, selectors, services
from registry.evaluation.episodes import DONE, EpisodeResult, PlayedEvaluation
from registry.models import Environment, Evaluation, EvaluationRun, ValidationRun
from registry.services import accounts, evaluation, validation

pytestmark = pytest.mark.django_db

MAZE = {"openenv.yaml": b"name: maze\nversion: 1.0.0\n", "README.md": b"---\ntags: [openenv]\n---\n# Maze\n"}
SCHEMAS = {"action": {"type": "object", "properties": {"move": {"type": "string"}}},
           "observation": {"type": "object", "properties": {"cell": {"type": "integer"}}}}
REWARDS = [0.1, 0.4, 0.35, 0.8, 0.55, 0.6, 0.2, 0.45, 0.5, 0.3, 0.65, 0.5]


@pytest.fixture
def maze(hub_stub, settings):
    """alice/maze indexed from the Hub stand-in, its head validated (pass) with an action and observation schema."""
    settings.HUB_VALIDATE_NEW_REVISIONS = False
    hub_stub.put_space("alice/maze", MAZE)
    assert services.hub_sync().run.errors == 0
    env = Environment.objects.get(key="alice/maze")
    validate(env, SCHEMAS)
    return hub_stub


def validate(env: Environment, schemas: dict, outcome: str = "pass") -> ValidationRun:
    env.refresh_from_db()
    run, _ = validation.validation_run_request(revision=env.head, trigger="request")
    validation.validation_run_start(run_id=run.pk)
    assert validation.validation_run_finish(run_id=run.pk, outcome=outcome, report={"results": []},
                                            observed={"schemas": schemas})
    run.refresh_from_db()
    return run


def played(rewards, agent="random", kind="policy", steps=5) -> PlayedEvaluation:
    return PlayedEvaluation(agent=agent, agent_kind=kind, harness="test harness", harness_version="1",
                            client_version="0.10.0",
                            episodes=[EpisodeResult(seed=i, reward=r, steps=steps, ended=DONE, wall_s=0.1)
                                      for i, r in enumerate(rewards)])


def env():
    return Environment.objects.select_related("head").get(key="alice/maze")


def test_statistics_are_computed_from_the_episodes(maze):
    row, created = evaluation.evaluation_record(revision=env().head, provenance="self_reported",
                                                played=played(REWARDS), submitted_by="hf:alice")
    expected = evalstats.summarize(REWARDS)
    assert created and row.episode_count == 12 and row.seeds == list(range(12))
    assert math.isclose(row.mean, sum(REWARDS) / 12) and math.isclose(row.std, expected.std)
    assert (row.ci_low, row.ci_high, row.ci_method) == (expected.ci_low, expected.ci_high, "t")
    assert row.ci_low < row.mean < row.ci_high
    assert row.verdict == "pass" and len(row.schema_digest) == 64  # what it was measured on


@pytest.mark.parametrize("rewards, steps, message", [
    ([0.5, float("nan")], 5, "finite number"),
    ([0.5, float("inf")], 5, "finite number"),
    ([0.5, 7.0], 5, "reward 7.0 is outside [0, 5], the declared per-step range [0, 1] over 5 steps"),
    ([0.5, -0.1], 5, "outside"),
    ([], 5, "at least one episode"),
    ([0.5, True], 5, "finite number"),
])
def test_bad_episodes_are_refused_and_nothing_is_stored(maze, rewards, steps, message):
    with pytest.raises(evaluation.EvaluationRefused, match=re.escape(message)):
        evaluation.evaluation_record(revision=env().head, provenance="self_reported", played=played(rewards, steps=steps),
                                     submitted_by="hf:alice")
    assert not Evaluation.objects.exists()


def test_an_episode_reward_may_sum_its_steps_rewards(maze):
    row, _ = evaluation.evaluation_record(revision=env().head, provenance="hub_run", played=played([4.5], steps=5),
                                          submitted_by="hub")
    assert row.ci_method == "none" and row.ci_low is None


def test_an_idempotency_key_makes_resubmission_safe(maze):
    first, created = evaluation.evaluation_record(revision=env().head, provenance="self_reported",
                                                  played=played(REWARDS), submitted_by="hf:alice", idempotency_key="k1")
    again, created_again = evaluation.evaluation_record(revision=env().head, provenance="self_reported",
                                                        played=played(REWARDS), submitted_by="hf:alice",
                                                        idempotency_key="k1")
    assert created and not created_again and again.pk == first.pk
    with pytest.raises(evaluation.EvaluationRefused, match="already used for different episodes") as refused:
        evaluation.evaluation_record(revision=env().head, provenance="self_reported", played=played(REWARDS[:5]),
                                     submitted_by="hf:alice", idempotency_key="k1")
    assert refused.value.status == 409 and Evaluation.objects.count() == 1


def test_ranked_with_ties_and_stale_rows_hidden_after_a_schema_change(maze):
    head = env().head
    evaluation.evaluation_record(revision=head, provenance="hub_run", played=played(REWARDS, agent="first-valid"),
                                 submitted_by="hub")
    evaluation.evaluation_record(revision=head, provenance="self_reported", played=played([r + 0.02 for r in REWARDS],
                                 agent="org/model", kind="model"), submitted_by="hf:alice")
    evaluation.evaluation_record(revision=head, provenance="self_reported", played=played([0.0] * 6 + [0.05] * 6,
                                 agent="weak"), submitted_by="hf:alice")
    board = selectors.evaluations(environment=env())
    assert [r.agent for r in board.rows] == ["org/model", "first-valid", "weak"]
    assert [r.rank for r in board.rows] == [1, 2, 3]
    assert [r.tied for r in board.rows] == [False, True, False]  # 0.02 apart: indistinguishable; weak is not
    assert board.hidden_stale == 0

    # A new head with the same schemas and verdict: the results still describe the environment.
    maze.put_space("alice/maze", {**MAZE, "README.md": b"---\ntags: [openenv]\n---\n# Maze, reworded\n"})
    services.hub_sync()
    validate(env(), SCHEMAS)
    assert len(selectors.evaluations(environment=env()).rows) == 3

    # A head whose observation schema changed: every result measured before is stale, hidden, one click away.
    maze.put_space("alice/maze", {**MAZE, "README.md": b"---\ntags: [openenv]\n---\n# Maze 2\n"})
    services.hub_sync()
    assert len(selectors.evaluations(environment=env()).rows) == 3  # head not validated yet: nothing judged
    validate(env(), {**SCHEMAS, "observation": {"type": "object", "properties": {"cells": {"type": "array"}}}})
    board = selectors.evaluations(environment=env())
    assert board.rows == [] and board.hidden_stale == 3
    shown = selectors.evaluations(environment=env(), include_stale=True)
    assert len(shown.rows) == 3 and all(r.stale for r in shown.rows) and Evaluation.objects.count() == 3
    # The same rule everywhere: the score badge skips them, a model's page marks them, an API detail says so.
    assert "no results" in Client().get("/badges/alice/maze/score.svg").content.decode()
    assert "tag-stale" in Client().get("/models/org/model/").content.decode()
    row = Evaluation.objects.get(agent="weak")
    assert Client().get(f"/api/v1/environments/alice/maze/evaluations/{row.pk}/").json()["stale"] is True


def test_the_api_lists_ranks_and_details_results(maze, client):
    head = env().head
    row, _ = evaluation.evaluation_record(revision=head, provenance="hub_run", played=played(REWARDS),
                                          submitted_by="hub")
    listed = client.get("/api/v1/environments/alice/maze/evaluations/").json()
    assert [r["id"] for r in listed] == [row.pk] and listed[0]["ci_method"] == "t" and "episodes" not in listed[0]
    assert listed[0]["revision"] == head.sha and listed[0]["stale"] is False and "payload_digest" not in listed[0]["source"]
    board = client.get("/api/v1/environments/alice/maze/leaderboard/?provenance=hub_run").json()
    assert board["head"] == head.sha and board["rows"][0]["rank"] == 1 and board["hidden_stale"] == 0
    assert client.get("/api/v1/environments/alice/maze/leaderboard/?provenance=imported").json()["rows"] == []
    detail = client.get(f"/api/v1/environments/alice/maze/evaluations/{row.pk}/").json()
    assert [e["reward"] for e in detail["episodes"]] == REWARDS and detail["seeds"] == list(range(12))
    bad = client.get("/api/v1/environments/alice/maze/evaluations/?provenance=rumour")
    assert bad.status_code == 400 and bad.json()["error"]["detail"]["provenance"]
    assert client.get("/api/v1/environments/alice/nope/leaderboard/").status_code == 404
    schema = client.get("/api/schema/?format=json").json()
    for path in ("/api/v1/environments/{owner}/{name}/evaluations/", "/api/v1/environments/{owner}/{name}/leaderboard/",
                 "/api/v1/environments/{owner}/{name}/evaluations/import/"):
        assert path in schema["paths"], path


def test_the_pages_show_the_leaderboard_with_interval_bars(maze, client):
    head = env().head
    evaluation.evaluation_record(revision=head, provenance="hub_run", played=played(REWARDS), submitted_by="hub")
    evaluation.evaluation_record(revision=head, provenance="self_reported",
                                 played=played([0.9] * 12, agent="org/model", kind="model"), submitted_by="hf:alice")
    page = client.get("/environments/alice/maze/").content.decode()
    assert 'id="leaderboard-h"' in page and "org/model" in page and "<svg class=\"ci\"" in page
    board = client.get("/environments/alice/maze/leaderboard/?provenance=hub_run").content.decode()
    assert "random" in board and "org/model" not in board and 'aria-label="mean 0.4' in board
    odd = client.get("/environments/alice/maze/leaderboard/?provenance=%3Cb%3E&revision=zz")
    assert odd.status_code == 200 and "Unknown provenance" in odd.content.decode() and "<b>" not in odd.content.decode()
    row = Evaluation.objects.get(agent="random")
    detail = client.get(f"/environments/alice/maze/evaluations/{row.pk}/").content.decode()
    assert "Student" in detail and detail.count("<tr>") >= 12
    model = client.get("/models/org/model/").content.decode()
    assert "alice/maze" in model and "0.9000" in model


def test_the_score_badge_shows_the_leader_or_the_asked_agent(maze, client):
    assert "no results" in client.get("/badges/alice/maze/score.svg").content.decode()
    evaluation.evaluation_record(revision=env().head, provenance="hub_run", played=played(REWARDS), submitted_by="hub")
    evaluation.evaluation_record(revision=env().head, provenance="hub_run", played=played([0.1] * 12, agent="noop"),
                                 submitted_by="hub")
    best = client.get("/badges/alice/maze/score.json").json()
    assert best["message"].startswith("0.45 ±") and best["message"].endswith("random")
    assert client.get("/badges/alice/maze/score.json?agent=noop").json()["message"] == "0.1 noop"
    assert "no results" in client.get("/badges/alice/unknown/score.svg").content.decode()


def test_a_pass_queues_one_baseline_and_evaluation_runs_share_the_run_state_machine(maze, settings):
    runs = EvaluationRun.objects.filter(kind="baseline")
    assert runs.count() == 1  # the fixture's validation passed
    run = runs.get()
    assert run.state == "queued" and run.params["validation_run"] and run.revision_id == env().head_id
    validate(env(), SCHEMAS)  # a second pass of the same revision: no second baseline
    assert runs.count() == 1

    started = evaluation.evaluation_run_start(run_id=run.pk, worker="w1")
    assert started.attempts == 1 and evaluation.evaluation_run_start(run_id=run.pk) is None
    EvaluationRun.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(hours=1))
    assert evaluation.evaluation_runs_reap(stale_after_s=60)["requeued"] == 1
    with pytest.raises(services.runs.RunNotRunning):
        evaluation.evaluation_run_heartbeat(run_id=run.pk, attempt=1)
    again = evaluation.evaluation_run_start(run_id=run.pk, worker="w2")
    assert again.attempts == 2
    # The first worker's result is dropped: its attempt is over.
    assert not evaluation.evaluation_run_finish(run_id=run.pk, outcome="done", played=[played(REWARDS)], attempt=1)
    assert evaluation.evaluation_run_finish(run_id=run.pk, outcome="done", played=[played(REWARDS)], attempt=2)
    row = Evaluation.objects.get()
    assert (row.provenance, row.run_id, row.submitted_by) == ("hub_run", run.pk, "hub")


def test_semantic_checks_join_the_validation_report_and_its_verdict(maze):
    run = ValidationRun.objects.filter(revision=env().head).latest("finished_at")
    validation.validation_run_finish  # the report the probe wrote has no semantic check
    check = {"check_id": "hub.reward_spread", "status": "fail", "measured": {"rewards": [0.0]},
             "evidence": ["every episode of both baselines earned 0"], "remediation": "Reward progress.",
             "duration_s": 0.0}
    ValidationRun.objects.filter(pk=run.pk).update(report={
        "target": "http://x", "source_digest": "sha256:" + "0" * 64, "manifest": None, "results": []})
    assert validation.validation_report_amend(run_id=run.pk, results=[check])
    run.refresh_from_db()
    assert [r["check_id"] for r in run.report["results"]] == ["hub.reward_spread"]
    assert run.outcome == "warn" and run.report["verdict"] == "warn"  # a warn-severity check that failed
    assert env().verdict_outcome == "warn"


# --- submissions and imports through the API ---------------------------------------------------------------

COLLECT = Path(__file__).resolve().parents[1] / "data" / "collect" / "counter-run"


def submission(sha: str, rewards=(1.0, 0.0, 0.5, 0.5), key="run-0001-alice", **extra) -> dict:
    body = {
        "config": {"harness_name": "my-harness", "harness_version": "1.2.0", "library_versions": {"openenv": "0.10.0"},
                   "dataset": "alice/maze-tasks", "eval_parameters": {"num_episodes": len(rewards)}},
        "scores": {"mean_reward": sum(rewards) / len(rewards)},
        "revision": sha[:9], "agent": {"name": "Qwen/Qwen2.5-7B-Instruct", "kind": "model"},
        "episodes": [{"reward": r, "seed": i, "steps": 3} for i, r in enumerate(rewards)],
        "idempotency_key": key,
    }
    body.update(extra)
    return body


def submit(body, token=None, raw: str | None = None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    data = raw if raw is not None else json.dumps(body)
    return Client().post("/api/v1/environments/alice/maze/evaluations/", data, content_type="application/json",
                         **headers)


def personal_token(name: str, *scopes: str) -> str:
    user = accounts.account_sign_in(claims={"sub": f"id-{name}", "preferred_username": name})
    return accounts.api_token_create(user=user, name="ci", scopes=scopes, days=1)[1]


def test_a_self_reported_result_needs_the_evaluate_scope_or_the_owners_hub_token(maze):
    maze.add_token("hf_alice", "alice")
    maze.add_token("hf_mallory", "mallory")
    sha = env().head.sha
    assert submit(submission(sha)).status_code == 401
    publish_only = submit(submission(sha), token=personal_token("bob", "publish"))
    assert publish_only.status_code == 403 and "evaluate" in publish_only.json()["error"]["message"]
    assert submit(submission(sha), token="hf_mallory").status_code == 403  # a stranger's Hub token
    assert not Evaluation.objects.exists()

    community = submit(submission(sha), token=personal_token("carol", "evaluate"))
    assert community.status_code == 201, community.json()
    row = community.json()
    assert (row["provenance"], row["submitted_by"], row["episode_count"]) == ("self_reported", "hf:carol", 4)
    assert row["mean"] == 0.5 and row["ci_method"] == "bootstrap" and row["revision"] == sha
    assert row["source"]["harness_name"] == "my-harness" and row["client_version"] == "0.10.0"
    again = submit(submission(sha), token=personal_token("carol2", "evaluate"))
    assert again.status_code == 200 and again.json()["id"] == row["id"]  # the same key and episodes
    changed = submit(submission(sha, rewards=(1.0, 1.0, 1.0, 1.0)), token="hf_alice")
    assert changed.status_code == 409 and changed.json()["error"]["code"] == "conflict"
    owner = submit(submission(sha, key="run-0002-alice"), token="hf_alice")
    assert owner.status_code == 201 and owner.json()["submitted_by"] == "hf:alice"


@pytest.mark.parametrize("change, message", [
    ({"scores": {"mean_reward": 0.9}}, "disagree"),
    ({"revision": "0123456789"}, "no single revision"),
    ({"episodes": [{"reward": 9.0, "steps": 3}] * 4, "scores": {"mean_reward": 9.0}}, "outside"),
    ({"config": {"harness_name": "h", "harness_version": "1", "library_versions": {}, "dataset": "d",
                 "eval_parameters": {"num_episodes": 5}}}, "says 5 episodes but 4 were submitted"),
])
def test_a_bad_submission_is_refused_with_its_reason_and_nothing_is_stored(maze, change, message):
    token = personal_token("carol", "evaluate")
    body = {**submission(env().head.sha), **change}
    answer = submit(body, token=token)
    assert answer.status_code == 400, answer.json()
    assert message in json.dumps(answer.json()["error"])
    assert not Evaluation.objects.exists()


def test_nan_in_a_submission_is_refused(maze):
    raw = json.dumps(submission(env().head.sha)).replace('"reward": 1.0', '"reward": NaN', 1)
    answer = submit(None, token=personal_token("carol", "evaluate"), raw=raw)
    assert answer.status_code == 400 and "NaN" in json.dumps(answer.json()) and not Evaluation.objects.exists()


def test_an_openenv_collect_dataset_is_imported_pinned_to_its_commit(hub_stub, settings):
    settings.HUB_VALIDATE_NEW_REVISIONS = False
    hub_stub.put_space("openenv/counter_env", MAZE)  # its Space host is https://openenv-counter-env.hf.space
    services.hub_sync()
    files = {p.name: p.read_bytes() for p in COLLECT.iterdir() if p.is_file()}
    sha = hub_stub.put_dataset("carol/counter-runs", files)
    hub_stub.put_dataset("carol/counter-runs", {**files, "results.jsonl": b"not json\n"})  # a later, broken commit
    hub_stub.add_token("hf_openenv", "openenv")
    url = "/api/v1/environments/openenv/counter_env/evaluations/import/"
    post = lambda body, token="hf_openenv": Client().post(  # noqa: E731
        url, json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    answer = post({"dataset": "carol/counter-runs", "dataset_revision": sha})
    assert answer.status_code == 201, answer.json()
    row = answer.json()
    assert row["provenance"] == "imported" and row["episode_count"] == 4
    assert row["source"]["dataset_revision"] == sha and row["source"]["matched_by"] == "env_base_url"
    assert any("env_base_url" in note for note in row["notes"])
    assert post({"dataset": "carol/counter-runs", "dataset_revision": sha}).status_code == 200  # once per commit
    broken = post({"dataset": "carol/counter-runs"})  # its head: the broken commit
    assert broken.status_code == 400 and "results.jsonl line 1" in json.dumps(broken.json())
    hub_stub.add_token("hf_mallory", "mallory")
    assert post({"dataset": "carol/counter-runs", "dataset_revision": sha}, token="hf_mallory").status_code == 403
    assert post({"dataset": "carol/nothing-here"}).status_code == 400
    assert Evaluation.objects.count() == 1


def test_staff_see_results_and_cancel_evaluation_runs_in_the_admin(maze, admin_client):
    evaluation.evaluation_record(revision=env().head, provenance="hub_run", played=played(REWARDS), submitted_by="hub")
    run = EvaluationRun.objects.get()
    listed = admin_client.get("/admin/registry/evaluation/").content.decode()
    assert "random" in listed and "alice/maze" in listed
    assert admin_client.get(f"/admin/registry/evaluation/{Evaluation.objects.get().pk}/change/").status_code == 200
    answer = admin_client.post("/admin/registry/evaluationrun/", {"action": "cancel", "_selected_action": [run.pk]})
    assert answer.status_code == 302
    run.refresh_from_db()
    assert run.state == "cancelled" and "Cancelled by" in run.reason
