"""`openenv-hub push`: publishing to the Hub stand-in (through huggingface_hub, and through the real `openenv
push`), then the hub's refresh contract, served by a tiny HTTP server of this test.

The contract (the refresh endpoint is being built on main): `POST /api/v1/environments/<owner>/<name>/refresh/`
with `Authorization: Bearer <token>` (a personal token, or the owner's Hugging Face token) answers
`202 {"environment", "status": "queued"}`, also for a Space not indexed yet, and 401/403/404/429 in the error
envelope; the environment's detail then shows `head_sha` and, once validated, `verdict.revision`.
"""

from __future__ import annotations

import json
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from huggingface_hub import HfApi, hf_hub_download

from tests.conftest import EXAMPLES, FIXTURE_ENVS
from tests.support.hubstub import HubStub

pytestmark = pytest.mark.integration

HF_TOKEN, HUB_TOKEN = "hf_alice_token", "oeh_alice_publish"
REMEDIATION = "Keep every step reward inside the declared range."


class ContractHub:
    """The hub's side of a push, as contracted: refresh, then the environment's detail and latest validation.

    A refresh reads the Space's head from the Hub stand-in; the detail shows it as head at once, and a verdict
    for it from the second poll on (`validate=False`: never), with `outcome`."""

    def __init__(self, stub: HubStub, *, outcome: str = "pass", validate: bool = True) -> None:
        self.stub, self.outcome, self.validate = stub, outcome, validate
        self.tokens = {HUB_TOKEN: "alice", HF_TOKEN: "alice"}
        self.refreshes: list[tuple[str, str]] = []
        self.indexed: dict[str, str] = {}
        self.polls: dict[str, int] = {}
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - stdlib name
                hub.answer(self, "GET")

            def do_POST(self):  # noqa: N802
                hub.answer(self, "POST")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    @staticmethod
    def send(handler, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def error(self, handler, status: int, code: str, message: str) -> None:
        self.send(handler, status, {"error": {"code": code, "message": message}})

    def answer(self, handler, method: str) -> None:
        match = re.fullmatch(r"/api/v1/environments/([^/]+)/([^/]+)/(refresh/|validations/latest/)?", handler.path)
        if match is None:
            return self.error(handler, 404, "not_found", "Not found.")
        owner, name, tail = match.groups()
        repo_id = f"{owner}/{name}"
        if method == "POST" and tail == "refresh/":
            auth = handler.headers.get("Authorization") or ""
            account = self.tokens.get(auth.removeprefix("Bearer "))
            if account is None:
                return self.error(handler, 401, "authentication_failed", "Invalid token.")
            if account != owner:
                return self.error(handler, 403, "permission_denied", f"{account} does not own {repo_id}.")
            self.refreshes.append((repo_id, auth))
            self.indexed[repo_id] = self.stub.head(repo_id)
            return self.send(handler, 202, {"environment": repo_id, "status": "queued"})
        if method != "GET":
            return self.error(handler, 405, "method_not_allowed", f'Method "{method}" not allowed.')
        sha = self.indexed.get(repo_id)
        if sha is None:
            return self.error(handler, 404, "not_found", f"No environment {repo_id} in the index.")
        verdict = {"outcome": self.outcome, "run_id": 7, "revision": sha, "finished_at": "2026-12-03T12:00:00Z",
                   "failing_checks": [] if self.outcome == "pass" else ["runtime.reward_well_formed"]}
        if tail == "validations/latest/":
            result = {"check_id": "runtime.reward_well_formed", "status": "fail", "measured": {},
                      "evidence": ["reward 5.0 at step 1"], "remediation": REMEDIATION, "duration_s": 0.1}
            return self.send(handler, 200, {"id": 7, "revision": sha, "outcome": self.outcome,
                                            "report": {"verdict": self.outcome, "results": [result]}})
        self.polls[repo_id] = self.polls.get(repo_id, 0) + 1
        validated = self.validate and self.polls[repo_id] >= 2
        self.send(handler, 200, {
            "id": repo_id, "owner": owner, "name": name, "status": "active", "head_sha": sha,
            "description": "Echoes each message back.", "verdict": verdict if validated else None,
            "page_url": f"{self.url}/environments/{repo_id}/",
            "pull_forms": [{"kind": "running_url", "label": "Running API", "language": "url", "note": "",
                            "text": f"https://{owner}-{name.replace('_', '-')}.hf.space"}],
        })


@pytest.fixture
def stub():
    with HubStub() as hub:
        hub.add_token(HF_TOKEN, "alice")
        yield hub
        assert hub.errors == []


@pytest.fixture
def contract(stub):
    hub = ContractHub(stub)
    yield hub
    hub.close()


@pytest.fixture
def push_env(stub, contract):
    return {"OPENENV_HUB_URL": contract.url, "OPENENV_HUB_TOKEN": HUB_TOKEN, "HF_ENDPOINT": stub.url,
            "HF_TOKEN": HF_TOKEN}


def test_push_through_huggingface_hub_then_the_hub_validates_it(run_cli, stub, contract, push_env, tmp_path):
    ran = run_cli("push", str(EXAMPLES / "echo_env"), "--uploader", "huggingface_hub", "--no-check",
                  "--poll-interval", "0.1", env=push_env)
    assert ran.code == 0, ran.both
    sha = stub.head("alice/echo_env")  # the default Space: <Hugging Face user>/<manifest name>
    assert contract.refreshes == [("alice/echo_env", f"Bearer {HUB_TOKEN}")]
    assert f"published alice/echo_env at {sha[:12]} (huggingface_hub)" in ran.err
    assert f"indexed {sha[:12]}; waiting for its validation" in ran.err  # piped: each stage once
    assert f"verdict   PASS at {sha[:12]}" in ran.out
    assert "Running API" in ran.out and "https://alice-echo-env.hf.space" in ran.out
    assert (f"[![conformance]({contract.url}/badges/alice/echo_env/conformance.svg)]"
            f"({contract.url}/environments/alice/echo_env/)") in ran.out

    # Staged as `openenv push` stages it: the Dockerfile at the root, the web interface on, base_path added.
    api = HfApi(endpoint=stub.url, token=HF_TOKEN)
    files = set(api.list_repo_files("alice/echo_env", repo_type="space"))
    assert "Dockerfile" in files and "server/Dockerfile" not in files and not any("__pycache__" in f for f in files)

    def read(path):
        return Path(hf_hub_download("alice/echo_env", path, repo_type="space", revision=sha, endpoint=stub.url,
                                    cache_dir=tmp_path / "cache")).read_text()

    assert "ENV ENABLE_WEB_INTERFACE=true" in read("Dockerfile")
    assert "base_path: /web" in read("README.md").split("---", 2)[1]

    again = run_cli("push", str(EXAMPLES / "echo_env"), "--repo-id", "alice/echo_env", "--uploader",
                    "huggingface_hub", "--no-check", "--poll-interval", "0.1", "--json", env=push_env)
    assert again.code == 0, again.both
    result = json.loads(again.out)
    assert set(result) == {"check", "published", "repo_id", "sha", "uploader", "refresh", "environment",
                           "validation", "badge_markdown"}
    assert result["sha"] == sha and stub.head("alice/echo_env") == sha  # nothing changed: no new commit
    assert result["refresh"] == {"environment": "alice/echo_env", "status": "queued"}
    assert result["environment"]["verdict"]["revision"] == sha and result["check"] is None


def test_push_through_the_real_openenv_push_after_the_local_check(run_cli, stub, contract, push_env,
                                                                  openenv_python):
    env = {**push_env, "PATH": f"{Path(openenv_python).parent}{os.pathsep}{os.environ['PATH']}"}
    del env["OPENENV_HUB_TOKEN"]  # the publisher's Hugging Face token is accepted by the hub too
    ran = run_cli("push", str(EXAMPLES / "echo_env"), "--repo-id", "alice/echo_env", "--poll-interval", "0.1",
                  "--json", env=env)
    assert ran.code == 0, ran.both
    result = json.loads(ran.out)
    assert result["uploader"] == "openenv" and result["sha"] == stub.head("alice/echo_env")
    assert result["check"]["verdict"] == "pass" and "hub.ws_episode" in [
        r["check_id"] for r in result["check"]["results"]]
    assert contract.refreshes == [("alice/echo_env", f"Bearer {HF_TOKEN}")]
    assert "Deployment complete" in ran.err  # openenv push's own output, kept off stdout
    assert stub.count("commit", method="POST", repo_id="alice/echo_env") == 1


def test_a_failing_verdict_exits_1_with_the_remediation(run_cli, stub, contract, push_env):
    contract.outcome = "fail"
    ran = run_cli("push", str(EXAMPLES / "echo_env"), "--repo-id", "alice/echo_env", "--uploader",
                  "huggingface_hub", "--no-check", "--poll-interval", "0.1", env=push_env)
    assert ran.code == 1, ran.both
    assert "verdict   FAIL" in ran.out and "runtime.reward_well_formed" in ran.out
    assert f"fix: {REMEDIATION}" in ran.out and "reward 5.0 at step 1" in ran.out


def test_waiting_ends_at_the_timeout_with_a_clear_sentence(run_cli, stub, contract, push_env):
    contract.validate = False
    ran = run_cli("push", str(EXAMPLES / "echo_env"), "--repo-id", "alice/echo_env", "--uploader",
                  "huggingface_hub", "--no-check", "--poll-interval", "0.2", "--timeout", "1", env=push_env)
    sha = stub.head("alice/echo_env")
    assert ran.code == 4, ran.both
    assert ran.err.endswith(
        f"openenv-hub: The hub did not index and validate alice/echo_env@{sha[:12]} within 1 s; it may still: "
        "`openenv-hub info alice/echo_env` shows where it is, or run push again with a longer --timeout.\n")


@pytest.mark.parametrize("token, message", [
    ("oeh_wrong", "Invalid token."),
    ("oeh_bob", "bob does not own alice/echo_env."),
])
def test_a_refused_refresh_says_what_was_published_and_why_the_hub_refused(run_cli, stub, contract, push_env,
                                                                            token, message):
    contract.tokens["oeh_bob"] = "bob"
    ran = run_cli("push", str(EXAMPLES / "echo_env"), "--repo-id", "alice/echo_env", "--uploader",
                  "huggingface_hub", "--no-check", env={**push_env, "OPENENV_HUB_TOKEN": token})
    sha = stub.head("alice/echo_env")
    assert ran.code == 3 and "Traceback" not in ran.err
    assert ran.err.endswith(f"openenv-hub: Published alice/echo_env@{sha[:12]}, but asking the hub to index it "
                            f"failed: The hub refused: {message}\n")


def test_without_any_token_nothing_is_published(run_cli, stub, push_env):
    env = {k: v for k, v in push_env.items() if k not in ("OPENENV_HUB_TOKEN", "HF_TOKEN")}
    ran = run_cli("push", str(EXAMPLES / "echo_env"), "--repo-id", "alice/echo_env", "--no-check", env=env)
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


def test_no_wait_returns_after_the_refresh(run_cli, stub, contract, push_env):
    ran = run_cli("push", str(EXAMPLES / "echo_env"), "--repo-id", "alice/echo_env", "--uploader",
                  "huggingface_hub", "--no-check", "--no-wait", "--json", env=push_env)
    assert ran.code == 0, ran.both
    result = json.loads(ran.out)
    assert result["published"] is True and result["environment"] is None and result["validation"] is None
    assert result["refresh"] == {"environment": "alice/echo_env", "status": "queued"}
    assert contract.polls == {}  # it never asked for the environment
    assert result["badge_markdown"] == (f"[![conformance]({contract.url}/badges/alice/echo_env/conformance.svg)]"
                                        f"({contract.url}/environments/alice/echo_env/)")
