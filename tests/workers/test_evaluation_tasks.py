"""Evaluations through a real Celery worker: a pass queues the baseline, which plays the reference policies against
the running Space over /ws and adds the semantic checks to the validation report; a model is evaluated on request
through the OpenAI-compatible stand-in."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from registry import services
from registry.models import Environment, Evaluation, EvaluationRun, ValidationRun
from registry.services import validation
from tests.conftest import EXAMPLES
from tests.support.envserver import EnvServer
from tests.support.worker import celery_worker, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

GUESS = "openenv/guess_number"


@pytest.fixture
def guess_space(corpus_stub, validation_settings, openenv_python):
    """openenv/guess_number: a Hub Space whose files are examples/envs/guess_number, its app served on 127.0.0.1."""
    files = {p.relative_to(EXAMPLES / "guess_number").as_posix(): p.read_bytes()
             for p in (EXAMPLES / "guess_number").rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    corpus_stub.put_space(GUESS, files)
    server = EnvServer(EXAMPLES / "guess_number", python=openenv_python).start()
    try:
        server.wait_ready()
        corpus_stub.update_space(GUESS, host=server.base_url)
        validation_settings.HUB_PROBE_ALLOWED_HOSTS = ["127.0.0.1"]
        services.space_index_by_id(repo_id=GUESS)
        yield server
    finally:
        server.stop()


def worker_env(settings, **extra) -> dict[str, str]:
    return {"HUB_PROBE_ALLOWED_HOSTS": "127.0.0.1", "HUB_VALIDATION_HEARTBEAT_S": "1",
            "HUB_PROBE_FIRST_WORK_BUDGET_S": str(settings.HUB_PROBE_FIRST_WORK_BUDGET_S),
            "HUB_EVAL_BASELINE_EPISODES": "20", "HUB_EVAL_MAX_STEPS": "10", **extra}


def guess() -> Environment:
    return Environment.objects.select_related("head").get(key=GUESS)


def test_a_pass_gets_a_baseline_and_semantic_checks_from_the_worker(guess_space, validation_settings, tmp_path):
    log = tmp_path / "worker.log"
    with celery_worker(queues="validation,evaluation", env=worker_env(validation_settings), log=log):
        run, _ = validation.validation_run_request(revision=guess().head, trigger=ValidationRun.Trigger.REQUEST,
                                                   runner="space")
        wait_for(lambda: EvaluationRun.objects.filter(state="finished").exists(), timeout=300,
                 what=f"the validation and its baseline (worker log: {log})")
    baseline = EvaluationRun.objects.get()
    assert (baseline.kind, baseline.outcome, baseline.target_url) == ("baseline", "done", guess_space.base_url), \
        baseline.reason
    rows = {row.agent: row for row in Evaluation.objects.all()}
    assert set(rows) == {"random", "first-valid"}
    for row in rows.values():
        assert (row.provenance, row.episode_count, row.seeds) == ("hub_run", 20, list(range(20)))
        assert row.ci_method == "t" and row.revision_id == guess().head_id and row.verdict in ("pass", "warn")
        assert all(e["steps"] <= 10 for e in row.episodes)
    # The same seeds give the same secret numbers: replayed, the first-valid policy earns the same rewards.
    run.refresh_from_db()
    checks = {r["check_id"]: r for r in run.report["results"]}
    assert checks["hub.determinism"]["status"] == "pass", checks["hub.determinism"]
    assert {"hub.reward_spread", "hub.episode_termination"} <= set(checks)
    assert run.outcome == run.report["verdict"] == guess().verdict_outcome

    # The catalog shows the floor: on the page, in the API and on the score badge.
    page = Client().get(f"/environments/{GUESS}/").content.decode()
    assert "first-valid" in page and "random" in page
    board = Client().get(f"/api/v1/environments/{GUESS}/leaderboard/").json()
    assert [r["agent"] for r in board["rows"]] == sorted(rows, key=lambda a: -rows[a].mean)
    badge = json.loads(Client().get(f"/badges/{GUESS}/score.json").content)
    assert badge["message"].endswith(board["rows"][0]["agent"])


def test_an_owner_asks_for_a_model_evaluation_and_the_worker_plays_it(guess_space, corpus_stub, validation_settings,
                                                                       tmp_path):
    from tests.registry.test_model_player import bisect
    from tests.support.openai_stub import OpenAIStub, text

    key = "sk-worker-test-9a8b7c6d"
    corpus_stub.add_token("hf_openenv", "openenv")
    with OpenAIStub(api_key=key) as models:
        models.add_model("acme/bisect-7b", bisect)
        models.add_model("acme/babbler", lambda request: text("I would rather talk about the weather."))
        endpoint = f"{models.url}/v1"
        validation_settings.HUB_EVAL_OPENAI_BASE_URL = endpoint
        env_vars = worker_env(validation_settings, HUB_EVAL_OPENAI_BASE_URL=endpoint, HUB_EVAL_OPENAI_API_KEY=key,
                              HUB_EVAL_BASELINE="false")
        log = tmp_path / "worker.log"
        validation_settings.HUB_EVAL_BASELINE = False
        with celery_worker(queues="validation,evaluation", env=env_vars, log=log):
            run, _ = validation.validation_run_request(revision=guess().head, trigger=ValidationRun.Trigger.REQUEST,
                                                       runner="space")
            wait_for(lambda: ValidationRun.objects.filter(pk=run.pk, state="finished").exists(), timeout=300,
                     what=f"the validation (worker log: {log})")
            for model in ("acme/bisect-7b", "acme/babbler"):
                answer = Client().post(f"/api/v1/environments/{GUESS}/evaluations/runs/",
                                       json.dumps({"model": model, "episodes": 3}), content_type="application/json",
                                       HTTP_AUTHORIZATION="Bearer hf_openenv")
                assert answer.status_code == 202, answer.json()
            wait_for(lambda: EvaluationRun.objects.filter(kind="model", state="finished").count() == 2, timeout=300,
                     what=f"two model evaluations (worker log: {log})")
        assert models.errors == []
    good = Evaluation.objects.get(agent="acme/bisect-7b")
    assert (good.provenance, good.agent_kind, good.episode_count) == ("hub_run", "model", 3)
    assert good.mean == 1.0 and all(e["ended"] == "done" for e in good.episodes)  # bisection finds every secret
    babbler = Evaluation.objects.get(agent="acme/babbler")
    assert babbler.mean == 0.0 and all(e["ended"] == "failed" and e["invalid_actions"] >= 1 for e in babbler.episodes)
    assert key not in json.dumps([babbler.episodes, babbler.notes, good.notes])
    refused = Client().post(f"/api/v1/environments/{GUESS}/evaluations/runs/", json.dumps({"model": "x"}),
                            content_type="application/json")
    assert refused.status_code == 401
