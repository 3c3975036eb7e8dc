"""search, info, login and logout against the hub's Django app served live, and every way the hub can fail us."""

from __future__ import annotations

import json
import socket
import stat
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread

import httpx
import pytest

from registry import conformance
from registry.models import Environment
from registry.services import validation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

REMEDIATION = "Keep every step reward inside the declared range."


@pytest.fixture
def hub(live_server, local_envs):
    """The examples and the broken fixtures indexed; broken/reward_out_of_range with a finished failing run."""
    env = Environment.objects.select_related("head").get(key="broken/reward_out_of_range")
    run, _ = validation.validation_run_request(revision=env.head, trigger="request", runner="local")
    validation.validation_run_start(run_id=run.pk)
    report = conformance.build_report(results=[
        conformance.CheckResult("static.manifest", "pass", evidence=["openenv.yaml parses"]),
        conformance.CheckResult("runtime.reward_well_formed", "fail", evidence=["reward 5.0 at step 1 > 1.0"],
                                remediation=REMEDIATION),
    ], target="broken/reward_out_of_range@x", source_digest=env.head.sha, manifest=None)
    assert validation.validation_run_finish(run_id=run.pk, outcome="fail", report=report)
    return live_server.url


def test_search_piped_is_plain_and_json_is_the_api_answer(run_cli, hub):
    ran = run_cli("search", "guess", env={"OPENENV_HUB_URL": hub})
    assert ran.code == 0, ran.err
    assert "local/guess_number" in ran.out and "\x1b[" not in ran.out and ran.err == ""
    assert "local/echo_env" not in ran.out

    ran = run_cli("search", "--verdict", "fail", "--json", env={"OPENENV_HUB_URL": hub})
    assert ran.code == 0
    page = json.loads(ran.out)
    assert set(page) == {"next", "results"}
    assert [r["id"] for r in page["results"]] == ["broken/reward_out_of_range"]
    assert page["results"][0]["verdict"]["failing_checks"] == ["runtime.reward_well_formed"]

    listed = json.loads(run_cli("search", "--limit", "2", "--json", env={"OPENENV_HUB_URL": hub}).out)
    assert len(listed["results"]) == 2 and listed["next"]


def test_info_shows_the_verdict_the_failing_checks_with_remediation_pulls_and_badge(run_cli, hub):
    ran = run_cli("info", "broken/reward_out_of_range", env={"OPENENV_HUB_URL": hub})
    assert ran.code == 0, ran.err
    assert "verdict   FAIL at" in ran.out
    assert "runtime.reward_well_formed" in ran.out and f"fix: {REMEDIATION}" in ran.out
    assert "reward 5.0 at step 1 > 1.0" in ran.out
    badge = (f"[![conformance]({hub}/badges/broken/reward_out_of_range/conformance.svg)]"
             f"({hub}/environments/broken/reward_out_of_range/)")
    assert badge in ran.out
    assert "Pull it:" in ran.out
    assert httpx.get(f"{hub}/badges/broken/reward_out_of_range/conformance.svg").status_code == 200

    ran = run_cli("info", "Broken/Reward_Out_Of_Range", "--json", env={"OPENENV_HUB_URL": hub})
    assert ran.code == 0
    api = httpx.get(f"{hub}/api/v1/environments/broken/reward_out_of_range/").json()
    assert json.loads(ran.out) == api  # the API's own answer (the redirect to the canonical spelling followed)


def test_info_of_an_environment_never_validated(run_cli, hub):
    ran = run_cli("info", "local/echo_env", env={"OPENENV_HUB_URL": hub})
    assert ran.code == 0 and "verdict   not validated yet" in ran.out


def test_a_404_is_the_envelopes_message_in_one_sentence(run_cli, hub):
    ran = run_cli("info", "nobody/nothing", env={"OPENENV_HUB_URL": hub})
    assert ran.code == 3 and ran.out == ""
    assert ran.err == "openenv-hub: The hub refused: No environment nobody/nothing in the index.\n"


def test_a_hub_that_is_down(run_cli):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens once it is closed
    ran = run_cli("search", "x", env={"OPENENV_HUB_URL": f"http://127.0.0.1:{port}"})
    assert ran.code == 3
    assert ran.err == (f"openenv-hub: Could not reach the hub at http://127.0.0.1:{port}: nothing answers there "
                       "(is it running? OPENENV_HUB_URL or --hub says where it is).\n")


def test_something_that_is_not_the_hub(run_cli):
    class Html(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - stdlib name
            body = b"<html>a blog</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Html)
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        ran = run_cli("info", "a/b", env={"OPENENV_HUB_URL": url})
    finally:
        server.shutdown()
        server.server_close()
    assert ran.code == 3 and "Traceback" not in ran.err
    assert ran.err.startswith(f"openenv-hub: The answer from {url} is not the hub's API (HTTP 200, text/html)")


@pytest.mark.parametrize("args, env, message", [
    (["search", "x"], {"OPENENV_HUB_URL": "ftp://hub.example.org"},
     "OPENENV_HUB_URL must be an http(s) URL such as http://127.0.0.1:8000, not 'ftp://hub.example.org'."),
    (["--hub", "http://"], {}, "--hub must be an http(s) URL such as http://127.0.0.1:8000, not 'http://'."),
    (["info", "just-a-name"], {}, "'just-a-name' is not an environment id: give it as owner/name."),
])
def test_usage_errors_exit_2_with_one_sentence(run_cli, args, env, message):
    if args == ["--hub", "http://"]:
        args = [*args, "search"]
    ran = run_cli(*args, env=env)
    assert (ran.code, ran.out, ran.err) == (2, "", f"openenv-hub: {message}\n")


def test_login_stores_the_token_0600_per_hub_and_logout_removes_it(run_cli, cli_env, hub):
    token = "oeh_" + "s3cr3t" * 5
    ran = run_cli("login", env={"OPENENV_HUB_URL": hub}, input=token + "\n")
    assert ran.code == 0, ran.err
    assert token not in ran.both
    path = f"{cli_env['XDG_CONFIG_HOME']}/openenv-hub/credentials.json"
    assert f"stored in {path}" in ran.out
    mode = stat.S_IMODE(__import__("os").stat(path).st_mode)
    folder_mode = stat.S_IMODE(__import__("os").stat(path.rsplit("/", 1)[0]).st_mode)
    assert (mode, folder_mode) == (0o600, 0o700)
    with open(path) as fh:
        assert json.load(fh) == {"hubs": {hub: {"token": token}}}

    other = run_cli("login", env={"OPENENV_HUB_URL": "http://hub.example.org"}, input="oeh_other\n")
    assert other.code == 0
    with open(path) as fh:
        assert set(json.load(fh)["hubs"]) == {hub, "http://hub.example.org"}

    ran = run_cli("logout", "--json", env={"OPENENV_HUB_URL": hub})
    assert json.loads(ran.out) == {"hub": hub, "removed": True}
    with open(path) as fh:
        assert set(json.load(fh)["hubs"]) == {"http://hub.example.org"}
    assert run_cli("logout", env={"OPENENV_HUB_URL": hub}).out == f"No token was stored for {hub}.\n"
    run_cli("logout", env={"OPENENV_HUB_URL": "http://hub.example.org"})
    assert not __import__("os").path.exists(path)


def test_login_refuses_what_is_not_a_token(run_cli):
    ran = run_cli("login", input="\n")
    assert ran.code == 2 and "No token given" in ran.err
    ran = run_cli("login", input="two words\n")
    assert ran.code == 2 and "not a token" in ran.err


def test_login_on_a_terminal_asks_without_echo(run_cli_tty, cli_env):
    token = "oeh_typed_token_123"
    ran = run_cli_tty("login", send=token + "\n", env={"OPENENV_HUB_URL": "http://hub.example.org"})
    assert ran.code == 0, ran.out
    assert "Personal token for http://hub.example.org (input hidden):" in ran.out
    assert token not in ran.out
    with open(f"{cli_env['XDG_CONFIG_HOME']}/openenv-hub/credentials.json") as fh:
        assert json.load(fh)["hubs"]["http://hub.example.org"]["token"] == token


def test_read_commands_import_neither_django_nor_the_probe(cli_env, hub):
    """Start-up stays fast: search and info load the HTTP client, not Django, the probe or huggingface_hub."""
    import subprocess

    code = ("import sys; from cli.main import main; rc = main(['search', 'echo', '--json']); "
            "rc |= main(['info', 'local/echo_env', '--json']); "
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'django', 'registry', 'huggingface_hub', "
            "'celery', 'rest_framework'}); print(rc, heavy, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], env={**cli_env, "OPENENV_HUB_URL": hub},
                          capture_output=True, text=True, timeout=60)
    assert done.stderr.strip().splitlines()[-1] == "0 []", done.stderr
