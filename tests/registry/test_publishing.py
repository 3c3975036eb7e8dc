"""Publishers: sign in with Hugging Face over real HTTP, personal tokens, and what owners do to their
environments (validate, refresh, yank, deprecate) from the API and the website, with who may do what."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlsplit

import httpx
import pytest
from django.test import Client, TestCase
from django.utils import timezone

from registry import services
from registry.models import Account, ApiToken, Environment, OwnerAction, RevisionYank, ValidationRun
from registry.services import accounts
from registry.services import owner as owner_service
from registry.services import validation

pytestmark = pytest.mark.django_db

MAZE = {"openenv.yaml": b"name: maze\nversion: 1.0.0\n", "README.md": b"---\ntags: [openenv]\n---\n# Maze\n"}


def committed():
    return TestCase.captureOnCommitCallbacks(execute=False)


@pytest.fixture
def published(hub_stub, settings):
    """alice/maze (a user's Space) and acme/robot (an organization's), indexed from the Hub stand-in, and the
    people around them: alice; bob, a writer of acme; carol, a reader of acme; mallory, a stranger."""
    settings.HUB_VALIDATE_NEW_REVISIONS = False
    settings.HUB_REFRESH_COOLDOWN_S = 30
    hub_stub.put_space("alice/maze", MAZE)
    hub_stub.put_space("acme/robot", {**MAZE, "openenv.yaml": b"name: robot\n"})
    assert services.hub_sync().run.errors == 0
    hub_stub.add_token("hf_alice", "alice")
    hub_stub.add_token("hf_bob", "bob", orgs=["acme"], role="write")
    hub_stub.add_token("hf_carol", "carol", orgs=["acme"], role="read")
    hub_stub.add_token("hf_mallory", "mallory")
    return hub_stub


def signed_up(name: str, orgs=()) -> object:
    """The Django user of a Hub account, as a sign-in leaves it (see test_sign_in_over_real_http for the flow)."""
    return accounts.account_sign_in(claims={"sub": f"id-{name}", "preferred_username": name,
                                            "orgs": [{"preferred_username": o, "roleInOrg": r} for o, r in orgs]})


def token_of(user, *scopes: str, days: int = 30) -> str:
    return accounts.api_token_create(user=user, name="ci", scopes=scopes or ("publish",), days=days)[1]


def post(path: str, token: str | None = None, method: str = "post", **data):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return getattr(Client(), method)(path, data, content_type="application/json", **headers)


# --- sign-in -------------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_sign_in_over_real_http(live_server, hub_stub, settings):
    """The whole OpenID Connect flow over HTTP: the hub redirects to the Hub, the Hub (stand-in) asks and
    redirects back with a code, the hub exchanges it, checks the id_token's signature against the JWKS, reads
    userinfo, signs the person in, and keeps the account with its organizations, never the Hub's token."""
    callback = f"{live_server.url}/oidc/callback/"
    hub_stub.oauth.register_client("hub-app", "s3cret", (callback,))
    hub_stub.oauth.add_account("alice", orgs=[("acme", "write"), ("readers", "read")])
    settings.HUB_OAUTH_CLIENT_ID = settings.OIDC_RP_CLIENT_ID = "hub-app"
    settings.HUB_OAUTH_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET = "s3cret"
    settings.SIGN_IN_WITH_HUB = True
    for part in ("AUTHORIZATION", "TOKEN", "USER", "JWKS"):
        path = {"AUTHORIZATION": "authorize", "TOKEN": "token", "USER": "userinfo", "JWKS": "jwks"}[part]
        setattr(settings, f"OIDC_OP_{part}_ENDPOINT", f"{hub_stub.url}/oauth/{path}")

    with httpx.Client(follow_redirects=True, timeout=30) as browser:
        hub_stub.oauth.sign_in_as(None)  # nobody signed in on the Hub: it refuses
        page = browser.get(f"{live_server.url}/oidc/authenticate/")
        assert urlsplit(str(page.url)).path == "/account/sign-in-failed/" and page.status_code == 403
        assert not Account.objects.exists()

        hub_stub.oauth.sign_in_as("alice")
        home = browser.get(f"{live_server.url}/")
        assert "Sign in with Hugging Face" in home.text
        page = browser.get(f"{live_server.url}/oidc/authenticate/")
        assert page.status_code == 200 and urlsplit(str(page.url)).path == "/account/", page.url
        assert "Signed in with Hugging Face as <strong>alice</strong>" in page.text
        assert "acme" in page.text and hub_stub.oauth.tokens_issued == 1
        account = Account.objects.get()
        assert account.name == "alice" and account.orgs == [{"name": "acme", "role": "write"},
                                                            {"name": "readers", "role": "read"}]
        assert accounts.account_namespaces(account) == {"alice", "acme"}  # a reader of an org does not own its Spaces
        # The Hub's access token is in no session and no row.
        from django.contrib.sessions.models import Session

        stored = " ".join(str(s.get_decoded()) for s in Session.objects.all())
        assert "hf_oauth_" not in stored and "oidc_access_token" not in stored

        # Signing in again (roles changed on the Hub) updates the same account.
        hub_stub.oauth.add_account("alice", orgs=[])
        browser.cookies.clear()
        assert browser.get(f"{live_server.url}/oidc/authenticate/").status_code == 200
        assert Account.objects.count() == 1 and Account.objects.get().orgs == []


def test_sign_in_is_off_without_an_oauth_app(client, settings):
    settings.SIGN_IN_WITH_HUB = False
    page = client.get("/oidc/authenticate/")
    assert page.status_code == 404 and "not set up here" in page.content.decode()
    assert "Staff sign in" in client.get("/").content.decode()


# --- personal tokens ---------------------------------------------------------------------------------------


def test_tokens_are_shown_once_and_stored_as_digests(client):
    user = signed_up("alice")
    client.force_login(user)
    page = client.post("/account/tokens/", {"name": "laptop", "scopes": ["publish", "read"], "days": "30"})
    assert page.status_code == 201
    text = page.content.decode()
    token = ApiToken.objects.get()
    secret = text.split('data-kind="token">', 1)[1].split("<", 1)[0]
    assert secret.startswith("oeh_") and len(secret) == 47 and secret.startswith(token.prefix)
    assert secret not in str(ApiToken.objects.values_list()) and token.digest != secret
    assert token.scopes == ["publish", "read"] and token.expires_at > timezone.now() + timedelta(days=29)
    assert secret not in client.get("/account/").content.decode()  # shown once
    assert accounts.api_token_check(secret).token == token
    # Refusals say why and create nothing.
    for bad in ({"name": "", "scopes": ["read"], "days": "30"}, {"name": "x", "scopes": ["root"], "days": "30"},
                {"name": "x", "scopes": ["read"], "days": "9999"}, {"name": "x", "scopes": [], "days": "30"}):
        assert client.post("/account/tokens/", bad).status_code == 400
    assert ApiToken.objects.count() == 1
    # Revoked: stops working at once; someone else's token cannot be revoked from here.
    other = signed_up("mallory")
    theirs, _ = accounts.api_token_create(user=other, name="x", scopes=["read"], days=1)
    assert client.post(f"/account/tokens/{theirs.pk}/revoke/").status_code == 404
    assert client.post(f"/account/tokens/{token.pk}/revoke/").status_code == 302
    assert accounts.api_token_check(secret).problem.endswith("was revoked.")


def test_token_checks_and_last_use():
    user = signed_up("alice")
    token, secret = accounts.api_token_create(user=user, name="ci", scopes=["publish"], days=1)
    assert accounts.api_token_check(secret).token == token
    first = ApiToken.objects.get().last_used_at
    accounts.api_token_check(secret)
    assert ApiToken.objects.get().last_used_at == first  # at most one write a minute
    assert "not a token" in accounts.api_token_check("oeh_short").problem
    assert "knows no such token" in accounts.api_token_check("oeh_" + "A" * 43).problem
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert "expired" in accounts.api_token_check(secret).problem


# --- who may act --------------------------------------------------------------------------------------------

ACTIONS = {
    "revalidate": ("post", "validations/", {}),
    "refresh": ("post", "refresh/", {}),
    "yank": ("post", "revisions/{sha}/yank/", {"reason": "broken rewards"}),
    "unyank": ("delete", "revisions/{sha}/yank/", {}),
    "deprecate": ("post", "deprecation/", {"reason": "superseded"}),
    "undeprecate": ("delete", "deprecation/", {}),
}


@pytest.mark.parametrize("action", list(ACTIONS))
@pytest.mark.parametrize(("who", "expected"), [
    ("owner token", 2), ("owner hf", 2), ("org writer hf", 2), ("org writer token", 2), ("org reader hf", 403),
    ("stranger hf", 403), ("stranger token", 403), ("read-only token", 403), ("revoked token", 401),
    ("expired token", 401), ("anonymous", 401),
])
def test_every_owner_action_by_everyone(published, action, who, expected):
    env = Environment.objects.select_related("head").get(key="acme/robot" if "org" in who else "alice/maze")
    alice, bob, mallory = signed_up("alice"), signed_up("bob", [("acme", "write")]), signed_up("mallory")
    tokens = {
        "owner token": token_of(alice), "owner hf": "hf_alice", "org writer hf": "hf_bob",
        "org writer token": token_of(bob), "org reader hf": "hf_carol", "stranger hf": "hf_mallory",
        "stranger token": token_of(mallory), "read-only token": token_of(alice, "read"), "anonymous": None,
    }
    if who == "revoked token":
        token, tokens[who] = accounts.api_token_create(user=alice, name="old", scopes=["publish"], days=1)
        accounts.api_token_revoke(token=token)
    if who == "expired token":
        token, tokens[who] = accounts.api_token_create(user=alice, name="old", scopes=["publish"], days=1)
        ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now())
    if action == "unyank":
        owner_service.revision_yank(revision=env.head, reason="x", actor="staff:s", via="admin")
    if action == "undeprecate":
        owner_service.environment_deprecate(environment=env, reason="x", successor=None, actor="staff:s", via="admin")
    before = OwnerAction.objects.count()
    method, path, data = ACTIONS[action]
    response = post(f"/api/v1/environments/{env.repo_id}/{path.format(sha=env.head.sha[:10])}", tokens[who],
                    method=method, **data)
    if expected == 2:
        assert response.status_code in (200, 202), response.content
        recorded = OwnerAction.objects.order_by("-id").first()
        assert OwnerAction.objects.count() == before + 1 and recorded.via == "api"
        assert recorded.actor == {"owner token": "hf:alice", "owner hf": "hf:alice", "org writer hf": "hf:bob",
                                  "org writer token": "hf:bob"}[who]
    else:
        assert response.status_code == expected, response.content
        body = response.json()["error"]
        assert body["code"] in ("permission_denied", "authentication_failed", "not_authenticated")
        assert body["message"] and OwnerAction.objects.count() == before
        if who == "read-only token":
            assert "lacks the 'publish' scope" in body["message"]


def test_a_token_on_a_local_environment_is_refused_at_once(tiny_envs):
    response = post("/api/v1/environments/local/alpha/deprecation/", "hf_unknown", reason="x")
    assert response.status_code == 403 and "only the hub's staff" in response.json()["error"]["message"]


def test_an_unknown_environment_is_a_404_before_any_token(published):
    response = post("/api/v1/environments/alice/nothing/deprecation/", "hf_alice", reason="x")
    assert response.status_code == 404


# --- what the actions do --------------------------------------------------------------------------------------


def test_a_yanked_revision_is_never_the_last_known_good_and_is_marked_everywhere(published, client):
    env = Environment.objects.select_related("head").get(key="alice/maze")
    first = env.head
    published.put_space("alice/maze", {**MAZE, "openenv.yaml": b"name: maze\nversion: 2.0.0\n"})
    services.hub_sync()
    env.refresh_from_db()
    second = env.head
    for revision, outcome in ((first, "pass"), (second, "fail")):
        run, _ = validation.validation_run_request(revision=revision, trigger="request")
        validation.validation_run_start(run_id=run.pk)
        validation.validation_run_finish(run_id=run.pk, outcome=outcome, report={"verdict": outcome, "results": []})
    env.refresh_from_db()
    assert env.good_run.revision_id == first.pk
    alice = token_of(signed_up("alice"))
    with committed():
        response = post(f"/api/v1/environments/alice/maze/revisions/{first.sha}/yank/", alice,
                        reason="Rewards out of range; use 2.x.")
    assert response.status_code == 200
    assert response.json()["yanked"]["reason"] == "Rewards out of range; use 2.x."
    env.refresh_from_db()
    assert env.good_run is None  # the only passing revision is yanked
    detail = client.get("/api/v1/environments/alice/maze/").json()
    assert detail["last_known_good"] is None
    yanked = {r["sha"]: r["yanked"] for r in detail["revisions"]}
    assert yanked[first.sha]["reason"].startswith("Rewards") and yanked[second.sha] is None
    page = client.get(f"/environments/alice/maze/?revision={first.sha}").content.decode()
    assert "This revision was yanked" in page and "Rewards out of range" in page
    assert 'verdict-yanked' in client.get("/environments/alice/maze/").content.decode()
    badge = client.get("/badges/alice/maze/version.svg", {"revision": first.sha}).content.decode()
    assert "1.0.0 (yanked)" in badge
    history = client.get("/api/v1/environments/alice/maze/history/").json()["results"]
    assert history[0]["kind"] == "yank" and history[0]["actor"] == "hf:alice" and history[0]["revision"] == first.sha
    # Restored: the last known good comes back.
    assert post(f"/api/v1/environments/alice/maze/revisions/{first.sha[:8]}/yank/", alice, method="delete").json()[
        "yanked"] is None
    env.refresh_from_db()
    assert env.good_run.revision_id == first.pk
    # A yank needs a reason.
    refused = post(f"/api/v1/environments/alice/maze/revisions/{first.sha}/yank/", alice, reason="  ")
    assert refused.status_code == 400 and "reason" in refused.json()["error"]["detail"]


def test_deprecation_says_so_everywhere_and_points_at_the_successor(published, client):
    alice = token_of(signed_up("alice"))
    response = post("/api/v1/environments/alice/maze/deprecation/", alice, reason="Moved to a new home.",
                    successor="acme/robot")
    assert response.status_code == 200
    assert response.json()["deprecated"]["successor"] == "acme/robot"
    listed = client.get("/api/v1/environments/", {"q": "maze"}).json()["results"]
    assert listed[0]["deprecated"]["reason"] == "Moved to a new home."
    page = client.get("/environments/alice/maze/").content.decode()
    assert "Deprecated" in page and 'href="/environments/acme/robot/"' in page
    badge = client.get("/badges/alice/maze/conformance.svg").content.decode()
    assert "conformance: deprecated" in badge
    for successor, word in (("alice/maze", "succeed itself"), ("nobody/here", "no environment")):
        refused = post("/api/v1/environments/alice/maze/deprecation/", alice, reason="x", successor=successor)
        assert refused.status_code == 400 and word in str(refused.json()["error"]["detail"])
    assert post("/api/v1/environments/alice/maze/deprecation/", alice, method="delete").json()["deprecated"] is None
    assert "Deprecated" not in client.get("/environments/alice/maze/").content.decode()


def test_refresh_reads_the_space_now_even_before_it_was_indexed(published, settings):
    from celery import current_app

    sent = []
    original = current_app.send_task
    current_app.send_task = lambda name, args=(), **kw: sent.append((name, tuple(args)))
    try:
        alice = token_of(signed_up("alice"))
        with TestCase.captureOnCommitCallbacks(execute=True):
            response = post("/api/v1/environments/alice/fresh_env/refresh/", alice)
        assert response.status_code == 202 and response.json() == {"environment": "alice/fresh_env",
                                                                   "status": "queued"}
        assert sent == [("registry.index_space", ("alice/fresh_env",))]
        again = post("/api/v1/environments/alice/fresh_env/refresh/", alice)
        assert again.status_code == 429 and int(again["Retry-After"]) >= 1
        # Another namespace: not alice's to refresh.
        assert post("/api/v1/environments/acme/fresh/refresh/", alice).status_code == 403
    finally:
        current_app.send_task = original
    # What the task does, for real against the stand-in.
    published.put_space("alice/fresh_env", MAZE)
    assert services.space_index_by_id(repo_id="alice/fresh_env").run.new == 1


# --- the website ----------------------------------------------------------------------------------------------


def test_owners_manage_from_the_page_and_others_do_not_see_the_forms(published, client):
    env = Environment.objects.select_related("head").get(key="alice/maze")
    client.force_login(signed_up("mallory"))
    assert 'id="manage-h"' not in client.get("/environments/alice/maze/").content.decode()
    assert client.post("/environments/alice/maze/deprecation/", {"reason": "mine now"}).status_code == 403
    client.force_login(signed_up("alice"))
    page = client.get("/environments/alice/maze/").content.decode()
    assert 'id="manage-h"' in page and "Yank this revision" in page and "Deprecate" in page
    client.post("/environments/alice/maze/yank/", {"revision": env.head.sha, "reason": "Broken build."})
    assert RevisionYank.objects.get().reason == "Broken build."
    client.post("/environments/alice/maze/deprecation/", {"reason": "Old.", "successor": "acme/robot"})
    env.refresh_from_db()
    assert env.deprecated_at is not None and env.successor.repo_id == "acme/robot"
    page = client.get("/environments/alice/maze/").content.decode()
    assert "History" in page and "yanked a revision" in page and "by hf:alice" in page
    assert client.post("/environments/alice/maze/validate/").status_code == 302
    assert ValidationRun.objects.filter(environment=env).count() == 1
    assert OwnerAction.objects.filter(environment=env, via="web").count() == 3


# --- feeds ------------------------------------------------------------------------------------------------------

ATOM = "{http://www.w3.org/2005/Atom}"


def entries(client, path: str) -> list[tuple[str, str]]:
    import xml.etree.ElementTree as ET

    response = client.get(path)
    assert response.status_code == 200 and response["Content-Type"].startswith("application/atom+xml")
    root = ET.fromstring(response.content)
    return [(e.findtext(f"{ATOM}title"), e.findtext(f"{ATOM}summary") or "") for e in root.iter(f"{ATOM}entry")]


def test_feeds_site_wide_and_per_environment(published, client):
    env = Environment.objects.select_related("head").get(key="alice/maze")
    run, _ = validation.validation_run_request(revision=env.head, trigger="request")
    validation.validation_run_start(run_id=run.pk)
    validation.validation_run_finish(run_id=run.pk, outcome="fail", report={"verdict": "fail", "results": [
        {"check_id": "hub.ws_episode", "status": "fail", "measured": {}, "evidence": [], "duration_s": 0}]})
    owner_service.revision_yank(revision=env.head, reason="Broken <b>rewards</b>\x07.", actor="hf:alice", via="api")
    owner_service.environment_deprecate(environment=env, reason="Old.", successor=None, actor="hf:alice", via="api")
    site = entries(client, "/feeds/environments.atom")
    assert {title.split(" at ")[0] for title, _ in site} == {"alice/maze", "acme/robot"}
    verdicts = entries(client, "/feeds/verdicts.atom")
    assert verdicts == [(f"alice/maze fails at {env.head.sha[:12]}", "Failing checks: hub.ws_episode.")]
    own = [title for title, _ in entries(client, "/environments/alice/maze/feed.atom")]
    assert own[:2] == ["Deprecated the environment", f"Yanked a revision {env.head.sha[:12]}"]
    assert f"Fails at {env.head.sha[:12]}" in own and f"New revision {env.head.sha[:12]}" in own
    summaries = dict(entries(client, "/environments/alice/maze/feed.atom"))
    assert summaries[f"Yanked a revision {env.head.sha[:12]}"] == "Broken <b>rewards</b>."  # text, control char gone
    page = client.get("/environments/alice/maze/").content.decode()
    assert 'type="application/atom+xml"' in page and "/environments/alice/maze/feed.atom" in page
    assert client.get("/environments/nobody/nothing/feed.atom").status_code == 404


def test_staff_act_in_the_admin_and_history_says_so(published, admin_client):
    env = Environment.objects.select_related("head").get(key="alice/maze")
    url = "/admin/registry/revision/"
    asked = admin_client.post(url, {"action": "yank", "_selected_action": [env.head.pk]})
    assert asked.status_code == 200 and b'name="reason"' in asked.content  # the reason is asked for first
    done = admin_client.post(url, {"action": "yank", "_selected_action": [env.head.pk], "apply": "Yank",
                                   "reason": "Leaks a key in its logs."})
    assert done.status_code == 302 and RevisionYank.objects.get().reason == "Leaks a key in its logs."
    admin_client.post("/admin/registry/environment/", {"action": "deprecate", "_selected_action": [env.pk],
                                                       "apply": "Deprecate", "reason": "Unmaintained.",
                                                       "successor": "acme/robot"})
    env.refresh_from_db()
    assert env.deprecation_reason == "Unmaintained." and env.successor.repo_id == "acme/robot"
    kinds = list(OwnerAction.objects.filter(environment=env).values_list("kind", "via", "actor"))
    assert kinds == [("deprecate", "admin", "staff:admin"), ("yank", "admin", "staff:admin")]
    assert admin_client.get("/admin/registry/owneraction/").status_code == 200
    assert admin_client.get("/admin/registry/apitoken/").status_code == 200
