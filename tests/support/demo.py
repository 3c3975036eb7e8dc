"""A demo catalog, built the real way: the Hub stand-in's Spaces indexed through huggingface_hub, the bundled
examples validated in the sandbox, a revision that broke after one that passed, and hostile Spaces.

Used by the browser tests, `make screenshots`, and anyone who wants to look at the pages with data in them:

    DATABASE_URL=sqlite:///var/demo.sqlite3 python -m tests.support.demo var/demo-work
    DATABASE_URL=sqlite:///var/demo.sqlite3 python manage.py runserver --nostatic

It migrates the database first; run it on an empty one.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "envs"
CORPUS = REPO / "tests" / "data" / "openenv-envs"

# Hub facts the demo gives some Spaces, so that facets and sorts have something to show.
LIKES = {"openenv/echo_env": 42, "openenv/chess_env": 31, "openenv/coding_env": 27, "openenv/browsergym_env": 19,
         "openenv/atari_env": 12, "openenv/textarena_env": 8}
SLEEPING = ("openenv/atari_env", "openenv/carla_env", "openenv/unity_env")


def _validate_local(owner: str, name: str) -> None:
    from registry.models import Environment
    from registry.services import validation
    from workers import tasks

    env = Environment.objects.select_related("head").get(key=f"{owner}/{name}".lower())
    run, _ = validation.validation_run_request(revision=env.head, trigger="request")
    tasks.validate_run(run.pk)


def _hostile_run(repo_id: str) -> None:
    """A finished run whose evidence, schemas, tools and episode are markup meant to run in a browser."""
    from registry.models import Environment
    from registry.services import validation
    from tests.support.hostile_spaces import XSS

    env = Environment.objects.select_related("head").get(key=repo_id.lower())
    run, _ = validation.validation_run_request(revision=env.head, trigger="request", runner="space")
    validation.validation_run_start(run_id=run.pk, worker="demo")
    report = {"verdict": "fail", "results": [
        {"check_id": "hub.metadata", "status": "fail", "measured": {"name": XSS, "description": XSS},
         "evidence": [f"/metadata has no description: {XSS}"], "remediation": XSS, "duration_s": 0.01},
    ]}
    schema = {"type": "object", "title": XSS, "properties": {XSS: {"type": "string", "description": XSS,
                                                                   "enum": [XSS]}}, "required": [XSS]}
    observed = {
        "schemas": {"action": schema, "observation": schema, "state": schema},
        "tools": [{"name": XSS, "description": XSS, "inputSchema": schema}],
        "episode": [{"op": "reset", "label": "reset", "observation": XSS, "reward": None, "done": False},
                    {"op": "step", "label": "step 1", "sent": XSS, "observation": XSS, "reward": 0.5, "done": True}],
    }
    validation.validation_run_finish(run_id=run.pk, outcome="fail", report=report, observed=observed)


def seed(work: Path) -> None:
    """Build the demo catalog into the configured database (Django set up, migrations applied)."""
    from django.conf import settings

    from registry import services
    from tests.support.hostile_spaces import HOSTILE, SCRIPTED
    from tests.support.hubstub import HubStub

    work.mkdir(parents=True, exist_ok=True)
    local = work / "local"
    shutil.rmtree(local, ignore_errors=True)
    shutil.copytree(EXAMPLES, local, ignore=shutil.ignore_patterns("__pycache__", ".venv"))
    # A revision that passes, then a new one that breaks: the last-known-good case.
    shutil.copytree(EXAMPLES / "echo_env", local / "flaky_echo", ignore=shutil.ignore_patterns("__pycache__"))
    settings.HUB_VALIDATE_NEW_REVISIONS = False
    settings.HUB_EVAL_BASELINE_EPISODES = 10
    settings.HUB_LOCAL_SOURCES = [f"local={local}"]
    with HubStub(page_size=50) as stub:
        settings.HF_ENDPOINT = stub.url
        settings.HF_CACHE_DIR = work / "hf-cache"
        stub.seed_from_corpus(CORPUS, owner="openenv")
        for repo_id, (files, _code) in HOSTILE.items():
            stub.put_space(repo_id, files, tags=["openenv"])
        for repo_id, files in SCRIPTED.items():
            stub.put_space(repo_id, files)
        for repo_id, likes in LIKES.items():
            stub.set_likes(repo_id, likes)
        for repo_id in SLEEPING:
            stub.set_runtime(repo_id, "SLEEPING")
        print("hub:", services.hub_sync(), flush=True)
    print("local:", services.local_sync(), flush=True)
    for name in ("echo_env", "guess_number", "mcp_calculator", "flaky_echo"):
        _validate_local("local", name)
    environment = local / "flaky_echo" / "server" / "echo_env_environment.py"
    source = environment.read_text()
    assert "reward=echo_reward(message)," in source
    environment.write_text(source.replace("reward=echo_reward(message),", "reward=5.0,  # broken: outside [0, 1]"))
    print("local (flaky_echo breaks):", services.local_sync(), flush=True)
    _validate_local("local", "flaky_echo")
    _evaluations()
    _hostile_run("evil/readme_script")
    _owners_speak()


def _evaluations() -> None:
    """guess_number's baseline, played by the worker's task in the sandbox, and a model's self-reported result."""
    from registry.evaluation.episodes import DONE, EpisodeResult, PlayedEvaluation
    from registry.models import Environment, EvaluationRun
    from registry.services import evaluation
    from workers import tasks

    guess = Environment.objects.select_related("head").get(key="local/guess_number")
    for run in EvaluationRun.objects.filter(environment=guess, kind="baseline", state="queued"):
        tasks.evaluate_run(run.pk)
    rewards = [1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0]
    played = PlayedEvaluation(
        agent="acme/bisect-7b", agent_kind="model", harness="lighteval", harness_version="0.9.2",
        client_version="0.10.0", agent_revision="4f1c9a7e2b6d8c034f1c9a7e2b6d8c034f1c9a7e",
        episodes=[EpisodeResult(seed=i, reward=r, steps=7 if r == 0 else 5, ended=DONE, wall_s=2.5, success=r > 0)
                  for i, r in enumerate(rewards)])
    evaluation.evaluation_record(revision=guess.head, provenance="self_reported", played=played,
                                 submitted_by="hf:acme", idempotency_key="demo-bisect-7b")


# A staff account for looking at the owners' forms (the demo only: never a real deployment's).
STAFF_USER, STAFF_PASSWORD = "demo-staff", "demo-staff-password"


def _owners_speak() -> None:
    """What owners say: flaky_echo's broken head is yanked, textarena_env deprecated for chess_env."""
    from django.contrib.auth import get_user_model

    from registry.models import Environment
    from registry.services import owner

    flaky = Environment.objects.select_related("head").get(key="local/flaky_echo")
    owner.revision_yank(revision=flaky.head, reason="Rewards outside [0, 1]; use the previous revision.",
                        actor="staff:demo", via="admin")
    textarena = Environment.objects.get(key="openenv/textarena_env")
    owner.environment_deprecate(environment=textarena, reason="Superseded by a maintained environment.",
                                successor=Environment.objects.get(key="openenv/chess_env"), actor="hf:openenv",
                                via="web")
    get_user_model().objects.create_superuser(STAFF_USER, password=STAFF_PASSWORD)


def main(argv: list[str]) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hub.settings")
    sys.path.insert(0, str(REPO))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    seed(Path(argv[0] if argv else REPO / "var" / "demo-work").resolve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
