"""Owners request re-runs with their Hugging Face token, confirmed by the Hub's whoami (the stand-in's, here)."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.models import User
from django.test import Client

from registry import services
from registry.models import Environment, ValidationRun
from registry.services import validation

pytestmark = pytest.mark.django_db

RUNS = "/api/v1/environments/{}/validations/"


@pytest.fixture
def maze(hub_stub, settings):
    """alice/maze on the Hub stand-in, indexed, with no run yet."""
    settings.HUB_VALIDATE_NEW_REVISIONS = False
    hub_stub.put_space("alice/maze", {"openenv.yaml": b"name: maze\n", "README.md": b"# Maze\n"}, tags=["openenv"])
    services.space_index_by_id(repo_id="alice/maze")
    hub_stub.reset_requests()
    return Environment.objects.select_related("head").get(key="alice/maze")


def token_for(hub_stub, name: str, orgs=(), role: str = "write") -> str:
    """A fresh token per test, so the identity cache (Redis in CI) never answers from an earlier run."""
    token = f"hf_{uuid.uuid4().hex}"
    hub_stub.add_token(token, name, orgs=orgs, role=role)
    return token


def post(path: str, token: str | None = None, data=None, client: Client | None = None, address: str | None = None):
    """POST as a client at `address` (default: a fresh one, so the per-address lookup limit, kept in Redis
    in CI, never carries over from another test)."""
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    address = address or f"198.18.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"
    return (client or Client()).post(path, data or {}, content_type="application/json", REMOTE_ADDR=address,
                                     **headers)


def test_the_owner_and_members_of_the_owning_org_request_runs(hub_stub, maze):
    response = post(RUNS.format("alice/maze"), token_for(hub_stub, "alice"))
    assert response.status_code == 202, response.content
    run = ValidationRun.objects.get(pk=response.json()["id"])
    assert (run.trigger, run.requested_by, run.requested_by_hub, run.revision) == ("request", None, "alice", maze.head)
    assert run.runner == validation.default_runner(maze)

    # An organization's member owns what the organization publishes (case-insensitively, as on the Hub).
    hub_stub.put_space("MazeLab/hedge", {"openenv.yaml": b"name: hedge\n"}, tags=["openenv"])
    services.space_index_by_id(repo_id="MazeLab/hedge")
    member = token_for(hub_stub, "bob", orgs=["mazelab"])
    response = post(RUNS.format("MazeLab/hedge"), member)
    assert response.status_code == 202, response.content
    assert ValidationRun.objects.get(pk=response.json()["id"]).requested_by_hub == "bob"


def test_accounts_that_do_not_own_it_are_refused(hub_stub, maze):
    path = RUNS.format("alice/maze")
    stranger = post(path, token_for(hub_stub, "mallory", orgs=["alice-fans"]))
    assert stranger.status_code == 403
    assert stranger.json()["error"]["code"] == "permission_denied"
    assert "owner" in stranger.json()["error"]["message"]

    for role in ("read", "contributor"):  # members who cannot write to the organization do not own its Spaces
        hub_stub.put_space(f"MazeLab/r{role}", {"openenv.yaml": b"name: r\n"}, tags=["openenv"])
        services.space_index_by_id(repo_id=f"MazeLab/r{role}")
        member = post(RUNS.format(f"MazeLab/r{role}"), token_for(hub_stub, "carol", orgs=["MazeLab"], role=role))
        assert member.status_code == 403, role

    anonymous = post(path)
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"].startswith("Bearer")

    # A local account that is not staff owns nothing on the Hub either.
    User.objects.create_user("alice", password="pw")
    client = Client()
    client.login(username="alice", password="pw")
    assert post(path, client=client).status_code == 403
    assert ValidationRun.objects.count() == 0


@pytest.mark.parametrize("header", [
    "Bearer", "Bearer two tokens", "Bearer hf_\x7f", "Bearer " + "x" * 600,
])
def test_malformed_authorization_is_401_without_asking_the_hub(hub_stub, maze, header):
    response = Client().post(RUNS.format("alice/maze"), {}, content_type="application/json",
                             HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "authentication_failed"
    assert hub_stub.count("whoami") == 0


def test_a_refused_token_is_401_and_the_refusal_is_cached(hub_stub, maze):
    token = f"hf_{uuid.uuid4().hex}"  # never registered with the stand-in
    for _ in range(3):
        response = post(RUNS.format("alice/maze"), token)
        assert response.status_code == 401
        assert "did not accept" in response.json()["error"]["message"]
    assert hub_stub.count("whoami") == 1


def test_an_accepted_token_is_cached(hub_stub, maze):
    token = token_for(hub_stub, "alice")
    assert post(RUNS.format("alice/maze"), token).status_code == 202
    assert post(RUNS.format("alice/maze"), token).status_code == 200  # the live run, and no second whoami
    assert hub_stub.count("whoami") == 1


def test_reads_ignore_tokens_even_bad_ones_and_a_hub_outage(hub_stub, maze):
    hub_stub.inject("whoami", status=500, times=None)
    for token in ("hf_not_a_real_one", token_for(hub_stub, "alice")):
        for path in ("/api/v1/environments/", RUNS.format("alice/maze"), "/api/v1/environments/alice/maze/"):
            response = Client().get(path, HTTP_AUTHORIZATION=f"Bearer {token}")
            assert response.status_code == 200, (path, response.content)
    assert hub_stub.count("whoami") == 0


def test_unknown_tokens_per_address_are_limited(hub_stub, maze, settings):
    """Each token the cache does not know costs a whoami call: one address cannot spend the Hub's quota."""
    settings.HUB_IDENTITY_LOOKUPS_PER_MINUTE = 2
    address = f"198.19.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"
    statuses = [post(RUNS.format("alice/maze"), f"hf_{uuid.uuid4().hex}", address=address).status_code
                for _ in range(5)]
    assert 429 in statuses and set(statuses) <= {401, 429}
    assert hub_stub.count("whoami") <= 4  # two per minute, and five requests touch at most two minutes
    # Another address is not held back, and a known token never needs a lookup.
    assert post(RUNS.format("alice/maze"), token_for(hub_stub, "alice")).status_code == 202


def test_a_hub_that_cannot_answer_whoami_is_503_and_is_asked_again_later(hub_stub, maze):
    token = token_for(hub_stub, "alice")
    hub_stub.inject("whoami", status=500, times=None)
    response = post(RUNS.format("alice/maze"), token)
    assert response.status_code == 503 and response.json()["error"]["code"] == "hub_unavailable"
    assert hub_stub.count("whoami") == 2  # one retry, then the person gets an answer
    hub_stub.clear_injections()
    assert post(RUNS.format("alice/maze"), token).status_code == 202  # the failure was not cached


def test_local_environments_have_no_hub_owner(hub_stub, tiny_envs):
    response = post(RUNS.format("local/alpha"), token_for(hub_stub, "local", orgs=["Local"]))
    assert response.status_code == 403


def test_owners_wait_a_cooldown_and_do_not_choose_the_runner(hub_stub, maze, settings):
    token = token_for(hub_stub, "alice")
    path = RUNS.format("alice/maze")
    assert post(path, token, {"runner": "local"}).status_code == 403

    first = post(path, token)
    assert first.status_code == 202
    assert post(path, token).json()["id"] == first.json()["id"]  # the live run is returned, not a second one
    validation.validation_run_start(run_id=first.json()["id"])
    validation.validation_run_finish(run_id=first.json()["id"], outcome="pass", report={"results": []})

    settings.HUB_RERUN_COOLDOWN_S = 600
    too_soon = post(path, token)
    assert too_soon.status_code == 429
    assert too_soon.json()["error"]["code"] == "throttled"
    assert 590 <= int(too_soon["Retry-After"]) <= 600

    User.objects.create_user("staff", password="pw", is_staff=True)
    staff = Client()
    staff.login(username="staff", password="pw")
    assert post(path, client=staff).status_code == 202  # staff are not held back
    validation.validation_run_cancel(run_id=ValidationRun.objects.latest("id").pk, reason="test")

    settings.HUB_RERUN_COOLDOWN_S = 0
    assert post(path, token).status_code == 202


def test_the_environment_page_tells_owners_how_to_ask(hub_stub, maze, tiny_envs, settings):
    settings.SITE_URL = "https://hub.example.org"
    page = Client().get("/environments/alice/maze/").content.decode()
    assert "Own this Space?" in page
    assert "https://hub.example.org/api/v1/environments/alice/maze/validations/" in page
    assert "Own this Space?" not in Client().get("/environments/local/alpha/").content.decode()
