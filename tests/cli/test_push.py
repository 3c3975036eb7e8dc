"""`openenv-hub push` against the hub itself: publishing to the Hub stand-in (through huggingface_hub, and
through the real `openenv push`), the stand-in's webhook and the CLI's refresh reaching the hub (Django's live
server), a real Celery worker indexing the commit and validating the running Space (a real OpenEnv server on
127.0.0.1), and the CLI printing the verdict.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from huggingface_hub import HfApi, hf_hub_download

from registry.manifest import subdomain_for
from registry.models import OwnerAction, ValidationRun, WebhookDelivery
from registry.services import accounts
from tests.conftest import EXAMPLES, FIXTURE_ENVS
from tests.support.envserver import EnvServer
from tests.support.hubstub import HubStub
from tests.support.worker import celery_worker

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

HF_TOKEN, BOB_HF_TOKEN = "hf_alice_token", "hf_bob_token"
WEBHOOK_SECRET = "whsec-push-end-to-end"
ECHO = "alice/echo_env"


@pytest.fixture
def stub():
    with HubStub() as hub:
        hub.add_token(HF_TOKEN, "alice")
        hub.add_token(BOB_HF_TOKEN, "bob")
        yield hub
        assert hub.errors == []


@pytest.fixture
def hub(live_server, settings, stub, tmp_path):
    """The hub on a live server, reading the stand-in, told of every commit by the stand-in's webhook."""
    settings.HF_ENDPOINT = stub.url
    settings.HF_TOKEN = ""
    settings.HF_CACHE_DIR = tmp_path / "hf-cache"
    settings.HUB_LOCAL_SOURCES = []
    settings.HUB_RETRY_BASE_S = 0.05
    settings.HUB_WEBHOOK_SECRET = WEBHOOK_SECRET
    settings.HUB_VALIDATE_NEW_REVISIONS = True
    settings.HUB_REFRESH_COOLDOWN_S = 0
    settings.SITE_URL = live_server.url
    stub.add_webhook(f"{live_server.url}/webhooks/huggingface/", secret=WEBHOOK_SECRET)
    return live_server


@pytest.fixture
def worker(hub, tmp_path):
    """A real worker on both queues; Spaces served on 127.0.0.1 may be probed."""
    log = tmp_path / "worker.log"
    with celery_worker(queues="default,validation", log=log, env={
            "HUB_VALIDATE_NEW_REVISIONS": "true", "HUB_PROBE_ALLOWED_HOSTS": "127.0.0.1",
            "HUB_WEBHOOK_SECRET": WEBHOOK_SECRET}):
        yield log


def running_space(stub, package: Path, python: str, repo_id: str = ECHO):
    """Create `repo_id` on the stand-in (no commit yet) with `package`'s app already served on 127.0.0.1, as a
    Space whose container is up; a push then commits to it."""
    HfApi(endpoint=stub.url, token=HF_TOKEN).create_repo(repo_id, repo_type="space", space_sdk="docker")
    server = EnvServer(package, python=python).start()
    server.wait_ready()
    stub.update_space(repo_id, host=server.base_url)
    return server


@pytest.fixture
def echo_space(stub, openenv_python):
    server = running_space(stub, EXAMPLES / "echo_env", openenv_python)
    yield server
    server.stop()


@pytest.fixture
def push_env(stub, hub):
    return {"OPENENV_HUB_URL": hub.url, "HF_ENDPOINT": stub.url, "HF_TOKEN": HF_TOKEN}


def personal_token(name: str = "alice", scopes=("publish",)) -> str:
    user = accounts.account_sign_in(claims={"sub": f"id-{name}", "preferred_username": name})
    return accounts.api_token_create(user=user, name="ci", scopes=scopes, days=1)[1]


def worker_log(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:] if log.exists() else "(no worker log)"


def test_openenv_push_reaches_the_hub_by_webhook_and_the_cli_prints_the_verdict(run_cli, stub, push_env, worker,
                                                                                echo_space, openenv_python):
    """The whole flow: the real `openenv push` commits, the Hub's webhook and the refresh reach the hub, the
    worker indexes that commit and validates the running Space, and the CLI prints the verdict."""
    env = {**push_env, "PATH": f"{Path(openenv_python).parent}{os.pathsep}{os.environ['PATH']}"}
    ran = run_cli("push", str(EXAMPLES / "echo_env"), "--repo-id", ECHO, "--no-check", "--poll-interval", "0.2",
                  "--timeout", "300", "--json", env=env)
    assert ran.code == 0, ran.both + worker_log(worker)
    result = json.loads(ran.out)
    sha = stub.head(ECHO)
    assert result["uploader"] == "openenv" and result["sha"] == sha
    assert "Deployment complete" in ran.err  # openenv push's own output, kept off stdout
    assert result["refresh"] == {"environment": ECHO, "status": "queued"}
    verdict = result["environment"]["verdict"]
    assert (verdict["outcome"], verdict["revision"]) == ("pass", sha)
    # The hub heard of the commit from the Hub itself, and indexed exactly that sha.
    delivery = WebhookDelivery.objects.filter(repo_name=ECHO, head_sha=sha).exclude(status="duplicate").get()
    assert delivery.status == "done" and delivery.scope == "repo.content", delivery.outcome
    run = ValidationRun.objects.get(revision__sha=sha, state=ValidationRun.State.FINISHED)
    assert (run.outcome, run.runner, run.target_url) == ("pass", "space", echo_space.base_url)
    assert OwnerAction.objects.filter(kind="refresh", actor="hf:alice").exists()  # the CLI's refresh, as alice


def test_push_through_huggingface_hub_with_a_personal_token(run_cli, stub, push_env, worker, echo_space, tmp_path):
    token = personal_token()
    env = {**push_env, "OPENENV_HUB_TOKEN": token}
    ran = run_cli("push", str(EXAMPLES / "echo_env"), "--uploader", "huggingface_hub", "--no-check",
                  "--poll-interval", "0.2", "--timeout", "300", env=env)
    assert ran.code == 0, ran.both + worker_log(worker)
    sha = stub.head(ECHO)  # the default Space: <Hugging Face user>/<manifest name>
    assert f"published {ECHO} at {sha[:12]} (huggingface_hub)" in ran.err
    assert f"verdict   PASS at {sha[:12]}" in ran.out
    # The hub's pull forms: a Hub host that is not https (this test's server) is not offered; the subdomain is.
    assert "Running API" in ran.out and f"https://{subdomain_for(ECHO)}.hf.space" in ran.out
    url = push_env["OPENENV_HUB_URL"]
    assert f"[![conformance]({url}/badges/{ECHO}/conformance.svg)]({url}/environments/{ECHO}/)" in ran.out

    # Staged as `openenv push` stages it: the Dockerfile at the root, the web interface on, base_path added.
    api = HfApi(endpoint=stub.url, token=HF_TOKEN)
    files = set(api.list_repo_files(ECHO, repo_type="space"))
    assert "Dockerfile" in files and "server/Dockerfile" not in files and not any("__pycache__" in f for f in files)

    def read(path):
        return Path(hf_hub_download(ECHO, path, repo_type="space", revision=sha, endpoint=stub.url,
                                    cache_dir=tmp_path / "cache")).read_text()

    assert "ENV ENABLE_WEB_INTERFACE=true" in read("Dockerfile")
    assert "base_path: /web" in read("README.md").split("---", 2)[1]

    again = run_cli("push", str(EXAMPLES / "echo_env"), "--repo-id", ECHO, "--uploader", "huggingface_hub",
                    "--no-check", "--poll-interval", "0.2", "--timeout", "120", "--json", env=env)
    assert again.code == 0, again.both
    result = json.loads(again.out)
    assert set(result) == {"check", "published", "repo_id", "sha", "uploader", "refresh", "environment",
                           "validation", "badge_markdown"}
    assert result["sha"] == sha and stub.head(ECHO) == sha  # nothing changed: no new commit
    assert result["environment"]["verdict"]["revision"] == sha and result["check"] is None


def test_a_failing_verdict_exits_1_with_the_remediation(run_cli, stub, push_env, worker, openenv_python):
    server = running_space(stub, FIXTURE_ENVS / "reward_out_of_range", openenv_python, repo_id="alice/broken")
    try:
        ran = run_cli("push", str(FIXTURE_ENVS / "reward_out_of_range"), "--repo-id", "alice/broken", "--uploader",
                      "huggingface_hub", "--no-check", "--poll-interval", "0.2", "--timeout", "300", env=push_env)
    finally:
        server.stop()
    assert ran.code == 1, ran.both + worker_log(worker)
    assert "verdict   FAIL" in ran.out and "runtime.reward_well_formed" in ran.out
    assert "fix: " in ran.out


def test_waiting_ends_at_the_timeout_with_a_clear_sentence(run_cli, stub, push_env):
    """No worker runs: the hub queues the index job, and nothing ever gives it a verdict."""
    ran = run_cli("push", str(EXAMPLES / "echo_env"), "--repo-id", ECHO, "--uploader", "huggingface_hub",
                  "--no-check", "--poll-interval", "0.2", "--timeout", "1", env=push_env)
    sha = stub.head(ECHO)
    assert ran.code == 4, ran.both
    assert ran.err.endswith(
        f"openenv-hub: The hub did not index and validate {ECHO}@{sha[:12]} within 1 s; it may still: "
        f"`openenv-hub info {ECHO}` shows where it is, or run push again with a longer --timeout.\n")


@pytest.mark.parametrize("who", ["wrong", "bob"])
def test_a_refused_refresh_says_what_was_published_and_why_the_hub_refused(run_cli, stub, push_env, who):
    token = "oeh_" + "x" * 43 if who == "wrong" else BOB_HF_TOKEN
    ran = run_cli("push", str(EXAMPLES / "echo_env"), "--repo-id", ECHO, "--uploader", "huggingface_hub",
                  "--no-check", env={**push_env, "OPENENV_HUB_TOKEN": token})
    sha = stub.head(ECHO)
    assert ran.code == 3 and "Traceback" not in ran.err, ran.both
    prefix = f"openenv-hub: Published {ECHO}@{sha[:12]}, but asking the hub to index it failed: The hub refused: "
    assert prefix in ran.err, ran.err
    reason = ran.err.split(prefix, 1)[1]
    if who == "bob":
        assert reason.startswith("Only staff and the environment's owners may do this")
    else:
        assert "token" in reason.lower()


def test_without_any_token_nothing_is_published(run_cli, stub, push_env):
    env = {k: v for k, v in push_env.items() if k not in ("OPENENV_HUB_TOKEN", "HF_TOKEN")}
    ran = run_cli("push", str(EXAMPLES / "echo_env"), "--repo-id", ECHO, "--no-check", env=env)
    assert ran.code == 2 and "push needs a token for the hub: run `openenv-hub login`" in ran.err
    assert stub.space_ids() == []


def test_a_hugging_face_hub_refusal_is_one_sentence(run_cli, stub, push_env):
    ran = run_cli("push", str(EXAMPLES / "echo_env"), "--repo-id", "bob/echo_env", "--uploader", "huggingface_hub",
                  "--no-check", env=push_env)
    assert ran.code == 3 and "Traceback" not in ran.err
    assert "openenv-hub: The Hugging Face Hub refused to create the Space bob/echo_env: HTTP 403" in ran.err
    assert stub.space_ids() == []


def test_a_failing_local_check_stops_the_push(run_cli, stub, push_env, openenv_python):
    ran = run_cli("push", str(FIXTURE_ENVS / "reward_out_of_range"), "--repo-id", "alice/broken",
                  "--uploader", "huggingface_hub", env=push_env)
    assert ran.code == 1, ran.both
    assert "runtime.reward_well_formed" in ran.out and "fix: " in ran.out
    assert "Not published: fix the failing checks (or pass --force to publish anyway)." in ran.out
    assert stub.space_ids() == []


def test_no_wait_returns_after_the_refresh(run_cli, stub, push_env):
    ran = run_cli("push", str(EXAMPLES / "echo_env"), "--repo-id", ECHO, "--uploader", "huggingface_hub",
                  "--no-check", "--no-wait", "--json", env=push_env)
    assert ran.code == 0, ran.both
    result = json.loads(ran.out)
    assert result["published"] is True and result["environment"] is None and result["validation"] is None
    assert result["refresh"] == {"environment": ECHO, "status": "queued"}
    url = push_env["OPENENV_HUB_URL"]
    assert result["badge_markdown"] == f"[![conformance]({url}/badges/{ECHO}/conformance.svg)]({url}/environments/{ECHO}/)"
