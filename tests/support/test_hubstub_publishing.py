"""Publishing to the Hub stand-in: the real huggingface_hub client (create_repo, upload_folder, LFS, Space
variables and secrets), the real `openenv push` from the openenv package, and webhook deliveries."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import HfHubHTTPError

from tests.conftest import EXAMPLES
from tests.support.hubstub import HubStub

pytestmark = pytest.mark.integration

TOKEN, OTHER = "hf_alice_token", "hf_bob_token"


@pytest.fixture
def stub():
    with HubStub(page_size=5, lfs_threshold=4096) as hub:
        hub.add_token(TOKEN, "alice", orgs=["team"], role="write")
        hub.add_token(OTHER, "bob")
        yield hub
        assert hub.errors == []


@pytest.fixture
def api(stub):
    return HfApi(endpoint=stub.url, token=TOKEN)


class Receiver:
    """A real HTTP server that records what is POSTed to it (a webhook endpoint)."""

    def __init__(self, status: int = 200) -> None:
        self.posts: list[tuple[dict, dict]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - stdlib name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.posts.append((dict(self.headers), json.loads(body)))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/webhooks/hf"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def test_upload_folder_makes_a_commit_that_every_read_route_serves(stub, api, tmp_path):
    repo_url = api.create_repo("alice/echo_env", repo_type="space", space_sdk="docker", exist_ok=True)
    assert repo_url.repo_id == "alice/echo_env"
    created = stub.head("alice/echo_env")
    assert api.list_repo_files("alice/echo_env", repo_type="space") == [".gitattributes"]

    info = api.upload_folder(folder_path=str(EXAMPLES / "echo_env"), repo_id="alice/echo_env", repo_type="space",
                             ignore_patterns=["__pycache__", "*.pyc"])
    assert info.oid == stub.head("alice/echo_env") != created
    assert stub.revisions("alice/echo_env") == [created, info.oid]
    files = set(api.list_repo_files("alice/echo_env", repo_type="space"))
    assert {"openenv.yaml", "server/app.py", "server/Dockerfile", ".gitattributes"} <= files
    space = api.space_info("alice/echo_env")
    assert space.sha == info.oid and space.sdk == "docker"
    tree = {f.path: f for f in api.list_repo_tree("alice/echo_env", repo_type="space", revision=info.oid,
                                                  recursive=True)}
    assert tree["openenv.yaml"].size == (EXAMPLES / "echo_env" / "openenv.yaml").stat().st_size
    got = hf_hub_download("alice/echo_env", "server/app.py", repo_type="space", revision=info.oid,
                          endpoint=stub.url, cache_dir=tmp_path / "cache", token=TOKEN)
    assert Path(got).read_bytes() == (EXAMPLES / "echo_env" / "server" / "app.py").read_bytes()

    # Exist_ok again, and the same folder again: no new commit (the client skips files the Hub already has).
    api.create_repo("alice/echo_env", repo_type="space", space_sdk="docker", exist_ok=True)
    again = api.upload_folder(folder_path=str(EXAMPLES / "echo_env"), repo_id="alice/echo_env", repo_type="space",
                              ignore_patterns=["__pycache__", "*.pyc"])
    assert again.oid == info.oid and len(stub.revisions("alice/echo_env")) == 2

    # One changed file and one deleted file make exactly one new commit.
    api.upload_file(path_or_fileobj=b"name: echo_env\nversion: 0.2.0\n", path_in_repo="openenv.yaml",
                    repo_id="alice/echo_env", repo_type="space")
    api.delete_file("models.py", repo_id="alice/echo_env", repo_type="space")
    head = stub.head("alice/echo_env")
    assert len(stub.revisions("alice/echo_env")) == 4
    assert "models.py" not in api.list_repo_files("alice/echo_env", repo_type="space", revision=head)
    assert b"0.2.0" in Path(hf_hub_download("alice/echo_env", "openenv.yaml", repo_type="space", revision=head,
                                            endpoint=stub.url, cache_dir=tmp_path / "cache")).read_bytes()


def test_writes_need_a_token_with_rights_on_the_namespace(stub):
    anonymous, bob = HfApi(endpoint=stub.url, token=False), HfApi(endpoint=stub.url, token=OTHER)
    with pytest.raises(HfHubHTTPError) as refused:
        anonymous.create_repo("alice/x", repo_type="space", space_sdk="docker")
    assert refused.value.response.status_code == 401
    with pytest.raises(HfHubHTTPError) as refused:
        bob.create_repo("team/x", repo_type="space", space_sdk="docker")
    assert refused.value.response.status_code == 403
    HfApi(endpoint=stub.url, token=TOKEN).create_repo("team/x", repo_type="space", space_sdk="docker")
    with pytest.raises(HfHubHTTPError) as refused:
        bob.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id="team/x", repo_type="space")
    assert refused.value.response.status_code == 403
    with pytest.raises(HfHubHTTPError) as refused:  # an existing repo without exist_ok
        HfApi(endpoint=stub.url, token=TOKEN).create_repo("team/x", repo_type="space", space_sdk="docker")
    assert refused.value.response.status_code == 409
    assert len(stub.revisions("team/x")) == 1


def test_space_variables_and_secrets(stub, api):
    api.create_repo("alice/vars", repo_type="space", space_sdk="docker")
    api.add_space_variable("alice/vars", "MAX_STEPS", "100", description="steps")
    api.add_space_variable("alice/vars", "MODE", "fast")
    api.delete_space_variable("alice/vars", "MODE")
    variables = api.get_space_variables("alice/vars")
    assert {k: v.value for k, v in variables.items()} == {"MAX_STEPS": "100"}
    assert variables["MAX_STEPS"].description == "steps"
    api.add_space_secret("alice/vars", "API_KEY", "s3cret")
    secrets = api.get_space_secrets("alice/vars")
    assert list(secrets) == ["API_KEY"] and not hasattr(secrets["API_KEY"], "value")
    assert "s3cret" not in json.dumps(stub.requests[-1].__dict__, default=str)  # the answer never held it
    assert stub.space_secrets("alice/vars") == {"API_KEY": "s3cret"}
    assert len(stub.revisions("alice/vars")) == 1  # settings are not commits


def test_large_and_binary_files_go_through_lfs(stub, tmp_path):
    """huggingface_hub chooses LFS for what preupload says; without hf_xet it uses the LFS batch API."""
    folder = tmp_path / "pkg"
    folder.mkdir()
    big = os.urandom(3000) * 3  # 9,000 bytes: over the stand-in's 4 KiB threshold
    (folder / "weights.bin").write_bytes(big)
    (folder / "icon.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00 tiny but binary")
    (folder / "openenv.yaml").write_text("name: lfs_env\n")
    script = textwrap.dedent(f"""
        from huggingface_hub import HfApi
        api = HfApi(endpoint={stub.url!r}, token={TOKEN!r})
        api.create_repo("alice/lfs_env", repo_type="space", space_sdk="docker")
        print(api.upload_folder(folder_path={str(folder)!r}, repo_id="alice/lfs_env", repo_type="space").oid)
    """)
    env = {**os.environ, "HF_HUB_DISABLE_XET": "1", "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    sha = done.stdout.strip().splitlines()[-1]
    assert stub.head("alice/lfs_env") == sha
    assert stub.count("lfs", method="POST", repo_id="alice/lfs_env") >= 1  # the batch call
    assert stub.count("lfs", method="PUT") == 2
    api = HfApi(endpoint=stub.url, token=TOKEN)
    tree = {f.path: f for f in api.list_repo_tree("alice/lfs_env", repo_type="space", revision=sha)}
    assert tree["weights.bin"].lfs["sha256"] == hashlib.sha256(big).hexdigest()
    assert tree["icon.png"].lfs is not None and tree["openenv.yaml"].lfs is None
    got = hf_hub_download("alice/lfs_env", "weights.bin", repo_type="space", revision=sha, endpoint=stub.url,
                          cache_dir=tmp_path / "cache")
    assert Path(got).read_bytes() == big


def test_webhooks_follow_create_commit_move_and_delete(stub, api, receiver):
    hook = stub.add_webhook(receiver.url, secret="shh")
    api.create_repo("alice/hooked", repo_type="space", space_sdk="docker")
    first = stub.head("alice/hooked")
    info = api.upload_file(path_or_fileobj=b"name: hooked\n", path_in_repo="openenv.yaml", repo_id="alice/hooked",
                           repo_type="space")
    api.move_repo("alice/hooked", "team/hooked", repo_type="space")
    api.delete_repo("team/hooked", repo_type="space")
    deliveries = stub.wait_for_deliveries(4)
    assert [d.status for d in deliveries] == [200, 200, 200, 200]
    assert len(receiver.posts) == 4
    assert {headers["X-Webhook-Secret"] for headers, _ in receiver.posts} == {"shh"}
    events = [body for _, body in receiver.posts]
    assert [(e["event"]["action"], e["event"]["scope"]) for e in events] == [
        ("create", "repo"), ("update", "repo.content"), ("move", "repo"), ("delete", "repo")]
    created, updated, moved, deleted = events
    assert created["repo"] | {"url": None, "owner": None} == {
        "type": "space", "name": "alice/hooked", "id": created["repo"]["id"], "private": False, "headSha": first,
        "subdomain": "alice-hooked", "url": None, "owner": None}
    assert created["webhook"] == {"id": hook, "version": 3}
    assert updated["repo"]["headSha"] == info.oid
    assert updated["updatedRefs"] == [{"ref": "refs/heads/main", "oldSha": first, "newSha": info.oid}]
    assert moved["repo"]["name"] == "alice/hooked" and moved["movedTo"]["name"] == "team/hooked"
    assert deleted["repo"]["name"] == "team/hooked" and deleted["repo"]["id"] == created["repo"]["id"]


def test_a_failing_webhook_endpoint_is_recorded_and_later_events_still_go(stub, api):
    failing = Receiver(status=500)
    try:
        stub.add_webhook(failing.url, secret=None)
        api.create_repo("alice/a", repo_type="space", space_sdk="docker")
        stub.put_space("alice/a", {"openenv.yaml": "name: a\n"})
        deliveries = stub.wait_for_deliveries(2)
    finally:
        failing.close()
    assert [d.status for d in deliveries] == [500, 500]
    assert all("X-Webhook-Secret" not in headers for headers, _ in failing.posts)


def test_the_real_openenv_push_publishes_to_the_stand_in(stub, openenv_python, tmp_path):
    package = tmp_path / "echo_env"
    shutil.copytree(EXAMPLES / "echo_env", package, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = package / "openenv.yaml"
    manifest.write_text(manifest.read_text() + "variables:\n  GREETING: hello\n")
    openenv = Path(openenv_python).parent / "openenv"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"), "HF_ENDPOINT": stub.url, "HF_TOKEN": TOKEN,
           "HF_HUB_DISABLE_TELEMETRY": "1", "NO_COLOR": "1"}
    done = subprocess.run([str(openenv), "push", str(package), "--repo-id", "alice/echo_env", "--secret", "KEY=v"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    api = HfApi(endpoint=stub.url, token=TOKEN)
    files = set(api.list_repo_files("alice/echo_env", repo_type="space"))
    assert {"Dockerfile", "openenv.yaml", "server/app.py", "README.md"} <= files  # Dockerfile moved to the root
    sha = stub.head("alice/echo_env")
    dockerfile = hf_hub_download("alice/echo_env", "Dockerfile", repo_type="space", revision=sha, endpoint=stub.url,
                                 cache_dir=tmp_path / "cache")
    assert "ENABLE_WEB_INTERFACE=true" in Path(dockerfile).read_text()
    assert stub.space_variables("alice/echo_env") == {"GREETING": "hello"}
    assert stub.space_secrets("alice/echo_env") == {"KEY": "v"}
    assert stub.count("commit", method="POST", repo_id="alice/echo_env") == 1
