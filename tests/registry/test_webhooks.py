"""Hub webhooks end to end: real HTTP requests to the endpoint, the real task code, the real huggingface_hub client
against the Hub stand-in, and the real database; the burst runs through a live server and a real Celery worker."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.utils import timezone

from hub.celery import app
from registry import services
from registry.models import (
    Environment,
    EnvironmentAlias,
    OwnerAction,
    Revision,
    SyncRun,
    ValidationRun,
    WebhookDelivery,
)
from registry.services import webhooks
from tests.support.worker import celery_worker, wait_for
from workers import tasks

pytestmark = [pytest.mark.django_db, pytest.mark.integration]

SECRET = "whsec-Zt8q2-correct-horse"
URL = "/webhooks/huggingface/"
ECHO = "openenv/echo_env"


@pytest.fixture
def hook(settings, hub_stub):
    """The stand-in Hub with the webhook secret set; new revisions are not validated unless a test asks."""
    settings.HUB_WEBHOOK_SECRET = SECRET
    settings.HUB_VALIDATE_NEW_REVISIONS = False
    return hub_stub


def push(stub, repo_id: str = ECHO, text: str = "Echo.") -> str:
    """Commit a small OpenEnv environment to the stand-in; returns the new sha."""
    return stub.put_space(repo_id, {
        "openenv.yaml": f"spec_version: 1\nname: {repo_id.split('/')[1]}\n".encode(),
        "README.md": f"---\ntags: [openenv]\n---\n{text}\n".encode(),
    })


def payload(stub, repo_id: str = ECHO, *, action: str = "update", scope: str = "repo.content", sha: str | None = None,
            old: str | None = None, moved_to: str | None = None, private: bool = False, repo_type: str = "space",
            webhook_id: str = "65f0c0ffee0123456789abcd") -> dict:
    """A delivery as the Hub sends it (webhook version 3)."""
    try:
        object_id = stub.repo_object_id(repo_id)
    except KeyError:
        object_id = "0" * 24
    body = {
        "event": {"action": action, "scope": scope},
        "repo": {"type": repo_type, "name": repo_id, "id": object_id, "private": private,
                 "owner": {"id": "6f" * 12}, "url": {"web": f"https://huggingface.co/spaces/{repo_id}"}},
        "webhook": {"id": webhook_id, "version": 3},
    }
    if sha:
        body["repo"]["headSha"] = sha
        body["updatedRefs"] = [{"ref": "refs/heads/main", "oldSha": old, "newSha": sha}]
    if moved_to:
        body["movedTo"] = {"name": moved_to, "owner": {"id": "6f" * 12}}
    return body


def post(client, body=None, *, raw: bytes | str | None = None, secret: str | None = SECRET):
    headers = {"X-Webhook-Secret": secret} if secret is not None else {}
    data = raw if raw is not None else json.dumps(body)
    return client.post(URL, data=data, content_type="application/json", headers=headers)


@pytest.fixture
def deliver(client, django_capture_on_commit_callbacks):
    """POST a delivery; returns the response and the ids of the jobs it sent (after commit)."""
    def deliver(body=None, **kwargs):
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            response = post(client, body, **kwargs)
        jobs = [cb.args[0] for cb in callbacks if getattr(cb, "func", None) is webhooks._publish]
        return response, jobs
    return deliver


def run(*delivery_ids: int) -> list[str]:
    """Run the real task code for each delivery, in the order given."""
    return [tasks.handle_webhook(pk) for pk in delivery_ids]


def env(repo_id: str) -> Environment:
    return Environment.objects.select_related("head").get(key=repo_id.lower())


def delivery(pk: int) -> WebhookDelivery:
    return WebhookDelivery.objects.get(pk=pk)


# --- reading a delivery (pure) -------------------------------------------------------------------------------------


def test_a_fingerprint_covers_what_a_delivery_asks_and_nothing_else():
    from registry.webhooks import INDEX, MOVE, parse_delivery

    a, b, c = "a" * 40, "b" * 40, "c" * 40

    def body(name="Owner/Env", object_id="r1", **changes) -> bytes:
        data = {"event": {"action": "update", "scope": "repo.content"},
                "repo": {"type": "space", "name": name, "id": object_id, "headSha": b},
                "updatedRefs": [{"ref": "refs/heads/main", "oldSha": a, "newSha": b}],
                "webhook": {"id": "w1", "version": 3}}
        for key, value in changes.items():
            data[key] = value
        return json.dumps(data).encode()

    push = parse_delivery(body())
    assert (push.job, push.head_sha, push.previous_sha, push.ignored) == (INDEX, b, a, "")
    assert parse_delivery(body(webhook={"id": "w2", "version": 3})).fingerprint == push.fingerprint
    assert parse_delivery(body(name="owner/env")).fingerprint == push.fingerprint  # ids are case-insensitive
    # A reset back to b later is news again: the refs say where main came from.
    reset = body(updatedRefs=[{"ref": "refs/heads/main", "oldSha": c, "newSha": b}])
    assert parse_delivery(reset).fingerprint != push.fingerprint
    # A Space deleted and created again under the same id is another repository object.
    assert parse_delivery(body(object_id="r2")).fingerprint != push.fingerprint
    move = parse_delivery(body(event={"action": "move", "scope": "repo"}, movedTo={"name": "Env2"}))
    assert (move.job, move.moved_to) == (MOVE, "Owner/Env2")  # a bare new name keeps the owner


# --- who may deliver -------------------------------------------------------------------------------------------


def test_without_a_secret_configured_every_delivery_is_refused(hook, settings, deliver):
    settings.HUB_WEBHOOK_SECRET = ""
    sha = push(hook)
    for secret in (SECRET, "", None):
        response, jobs = deliver(payload(hook, sha=sha), secret=secret)
        assert response.status_code == 503 and jobs == []
        error = response.json()["error"]
        assert error["code"] == "not_configured" and "HUB_WEBHOOK_SECRET" in error["message"]
    assert list(WebhookDelivery.objects.values_list("status", "http_status")) == [("refused", 503)] * 3
    assert not Environment.objects.exists() and hook.count() == 0


def test_a_missing_or_wrong_secret_is_refused_and_never_stored(hook, deliver):
    sha = push(hook)
    response, jobs = deliver(payload(hook, sha=sha), secret=None)
    assert response.status_code == 401 and response.json()["error"]["code"] == "not_authenticated" and jobs == []
    assert "X-Webhook-Secret" in response.json()["error"]["message"]
    for wrong in ("nope", SECRET[:-1], SECRET + "x", SECRET.upper(), " " + SECRET):
        response, jobs = deliver(payload(hook, sha=sha), secret=wrong)
        assert response.status_code == 403, wrong
        assert response.json()["error"]["code"] == "permission_denied" and jobs == []
    assert set(WebhookDelivery.objects.values_list("status", flat=True)) == {"refused"}
    assert not Environment.objects.exists() and hook.count() == 0
    response, jobs = deliver(payload(hook, sha=sha))
    assert response.status_code == 202 and len(jobs) == 1
    for row in WebhookDelivery.objects.values():  # neither the secret nor any header is kept
        assert not any(SECRET in str(value) for value in row.values())


def test_only_post_is_a_delivery(hook, client):
    response = client.get(URL)
    assert response.status_code == 405 and response["Allow"] == "POST"
    assert response.json()["error"]["code"] == "method_not_allowed"
    # Without the trailing slash too: APPEND_SLASH cannot redirect a POST.
    sha = push(hook)
    response = client.post(URL.rstrip("/"), data=json.dumps(payload(hook, sha=sha)), content_type="application/json",
                           headers={"X-Webhook-Secret": SECRET})
    assert response.status_code == 202


# --- pushes ------------------------------------------------------------------------------------------------------


def test_a_push_indexes_exactly_the_pushed_sha_and_requests_a_validation(hook, deliver, settings):
    settings.HUB_VALIDATE_NEW_REVISIONS = True
    sha = push(hook)
    response, jobs = deliver(payload(hook, sha=sha, old=None))
    assert response.status_code == 202
    pk = response.json()["delivery"]
    assert response.json() == {"status": "queued", "delivery": pk} and jobs == [pk]
    assert hook.count() == 0  # the Hub is never called while the Hub waits for an answer
    row = delivery(pk)
    assert (row.status, row.action, row.scope, row.repo_type, row.repo_name, row.head_sha) == (
        "queued", "update", "repo.content", "space", ECHO, sha)

    assert run(pk) == ["done"]
    e = env(ECHO)
    assert e.status == "active" and e.head.sha == sha and e.head.manifest_name == "echo_env"
    assert ValidationRun.objects.filter(revision=e.head, trigger="new_revision", state="queued").count() == 1
    row = delivery(pk)
    assert row.status == "done" and sha[:12] in row.outcome and "new environment" in row.outcome
    assert row.processed_at >= row.received_at and row.duration_ms >= 0

    second = push(hook, text="Echo, improved.")
    response, jobs = deliver(payload(hook, sha=second, old=sha))
    assert run(*jobs) == ["done"]
    e = env(ECHO)
    assert e.head.sha == second and list(e.revisions.order_by("id").values_list("sha", flat=True)) == [sha, second]
    assert ValidationRun.objects.filter(revision=e.head, trigger="new_revision").count() == 1


def test_a_replayed_or_duplicated_push_changes_nothing(hook, deliver):
    sha = push(hook)
    first, jobs = deliver(payload(hook, sha=sha))
    pk = first.json()["delivery"]
    # The same push from a second webhook watching the same Space, before the first was handled.
    again, more = deliver(payload(hook, sha=sha, webhook_id="another-webhook"))
    assert again.status_code == 200 and more == []
    assert again.json() == {"status": "duplicate", "delivery": again.json()["delivery"], "duplicate_of": pk}
    run(pk)
    state = (Revision.objects.count(), SyncRun.objects.count(), env(ECHO).updated_at, env(ECHO).changed_at)
    hook.reset_requests()
    replay, more = deliver(payload(hook, sha=sha))  # the Hub's "replay" button, after it was handled
    assert replay.status_code == 200 and replay.json()["duplicate_of"] == pk and more == []
    assert run(pk) == ["ignored"]  # a redelivered task message for a handled delivery does nothing either
    assert (Revision.objects.count(), SyncRun.objects.count(), env(ECHO).updated_at, env(ECHO).changed_at) == state
    assert hook.count() == 0
    assert Counter(WebhookDelivery.objects.values_list("status", flat=True)) == {"done": 1, "duplicate": 2}


@pytest.mark.parametrize("order", ["in_order", "reversed"])
def test_deliveries_handled_out_of_order_never_move_head_backwards(hook, deliver, order):
    a = push(hook, text="A")
    first, _ = deliver(payload(hook, sha=a))
    b = push(hook, text="B")
    second, _ = deliver(payload(hook, sha=b, old=a))
    ids = [first.json()["delivery"], second.json()["delivery"]]
    run(*(ids if order == "in_order" else reversed(ids)))
    e = env(ECHO)
    assert e.head.sha == b and e.head.readme_body.strip() == "B"
    late = delivery(ids[0])
    assert late.status == "done" and f"serves {b[:12]}, not {a[:12]}" in late.outcome


def test_a_hub_that_lags_behind_the_push_is_asked_again(hook, deliver):
    a = push(hook, text="A")
    run(*deliver(payload(hook, sha=a))[1])
    b = push(hook, text="B")
    hook.reset_space(ECHO, a)  # the Hub's API still serves the commit this push replaced
    response, jobs = deliver(payload(hook, sha=b, old=a))
    handled = webhooks.webhook_delivery_handle(delivery_id=jobs[0], attempt=0)
    assert handled.status == "queued" and handled.retry_in == webhooks.RETRY_BASE_S
    assert env(ECHO).head.sha == a and "asking again in 30 s" in delivery(jobs[0]).outcome
    assert deliver(payload(hook, sha=b, old=a))[0].json()["status"] == "duplicate"  # still pending: still claimed
    hook.reset_space(ECHO, b)  # the Hub caught up
    assert webhooks.webhook_delivery_handle(delivery_id=jobs[0], attempt=1).status == "done"
    assert env(ECHO).head.sha == b


def test_a_failing_hub_is_retried_then_left_to_the_reconcile_and_stops_nothing(hook, deliver):
    push(hook, "broken/space")
    sha = push(hook)
    broken = deliver(payload(hook, "broken/space", sha=hook.head("broken/space")))[1][0]
    fine = deliver(payload(hook, sha=sha))[1][0]
    hook.inject("info", status=503, times=None, repo_id="broken/space")
    handled = webhooks.webhook_delivery_handle(delivery_id=broken, attempt=0)
    assert handled.retry_in == webhooks.RETRY_BASE_S and "could not answer" in delivery(broken).outcome
    handled = webhooks.webhook_delivery_handle(delivery_id=broken, attempt=webhooks.MAX_RETRIES)
    assert handled == webhooks.Handled("failed")
    row = delivery(broken)
    assert row.status == "failed" and row.claim is None and "reconcile" in row.outcome
    assert run(fine) == ["done"] and env(ECHO).head.sha == sha
    hook.clear_injections()
    # Failed, it no longer claims its fingerprint: the Hub's replay queues it again.
    replay, jobs = deliver(payload(hook, "broken/space", sha=hook.head("broken/space")))
    assert replay.status_code == 202 and run(*jobs) == ["done"] and env("broken/space").status == "active"


# --- deletions, moves, visibility ---------------------------------------------------------------------------------


def test_a_deletion_withdraws_and_keeps_history(hook, deliver):
    sha = push(hook)
    run(*deliver(payload(hook, sha=sha))[1])
    # A deletion the Hub does not confirm (forged, or the Space came back) withdraws nothing.
    response, jobs = deliver(payload(hook, action="delete", scope="repo"))
    assert response.status_code == 202 and run(*jobs) == ["done"] and env(ECHO).status == "active"

    hook.delete_space(ECHO)
    response, jobs = deliver(payload(hook, action="delete", scope="repo"))
    assert response.status_code == 202 and run(*jobs) == ["done"]
    e = env(ECHO)
    assert e.status == "withdrawn" and "Gone from the Hub" in e.status_reason
    assert e.head.sha == sha and e.revisions.count() == 1
    assert "Withdrew openenv/echo_env" in delivery(jobs[0]).outcome
    state = Environment.objects.filter(pk=e.pk).values().get()
    replay, jobs = deliver(payload(hook, action="delete", scope="repo"))
    assert run(*jobs) == ["done"]
    assert Environment.objects.filter(pk=e.pk).values().get() == state


def test_a_move_renames_keeps_history_and_the_old_name_redirects(hook, deliver, client):
    first = push(hook, text="first")
    run(*deliver(payload(hook, sha=first))[1])
    sha = push(hook, text="second")
    run(*deliver(payload(hook, sha=sha, old=first))[1])
    before = env(ECHO)
    revisions = list(before.revisions.order_by("id").values_list("pk", "sha"))
    new = "someone/Echo-Renamed"
    move = payload(hook, action="move", scope="repo", moved_to=new)
    hook.move_space(ECHO, new)
    response, jobs = deliver(move)
    assert response.status_code == 202 and run(*jobs) == ["done"]
    e = Environment.objects.get(pk=before.pk)
    assert (e.owner, e.name, e.key, e.status) == ("someone", "Echo-Renamed", "someone/echo-renamed", "active")
    assert list(e.revisions.order_by("id").values_list("pk", "sha")) == revisions and e.head_id == before.head_id
    assert not Environment.objects.filter(key=ECHO).exists()
    assert EnvironmentAlias.objects.get(key=ECHO).environment_id == e.pk
    action = OwnerAction.objects.get(environment=e)
    assert (action.kind, action.actor, action.via) == ("rename", "hub", "webhook")
    assert action.detail == {"from": ECHO, "to": new} and action.revision_id == e.head_id
    assert f"Renamed {ECHO} to {new}" in delivery(jobs[0]).outcome

    def moved(url: str, to: str, status: int = 301):
        response = client.get(url)
        assert response.status_code == status, (url, response.status_code)
        assert response["Location"] == to, url
        return response

    moved("/environments/openenv/echo_env/", "/environments/someone/Echo-Renamed/")
    moved("/environments/OpenEnv/ECHO_ENV/?revision=" + first[:8],
          "/environments/someone/Echo-Renamed/?revision=" + first[:8])
    page = client.get("/environments/someone/Echo-Renamed/")
    assert page.status_code == 200
    # Pull forms follow the new name: the Space's host moved with it.
    assert b"someone-echo-renamed.hf.space" in page.content and b"openenv-echo-env.hf.space" not in page.content
    api = "/api/v1/environments/"
    moved(f"{api}openenv/echo_env/", f"{api}someone/Echo-Renamed/")
    for tail in ("revisions/", f"revisions/{first}/", "validations/", "validations/latest/", "validations/7/"):
        moved(f"{api}openenv/echo_env/{tail}", f"{api}someone/Echo-Renamed/{tail}")
    detail = client.get(f"{api}someone/Echo-Renamed/").json()
    assert detail["name"] == "Echo-Renamed" and "someone-echo-renamed.hf.space" in json.dumps(detail["pull_forms"])
    catalog = client.get("/api/v1/catalog.json").content
    assert b"someone-echo-renamed.hf.space" in catalog and b"openenv-echo-env.hf.space" not in catalog
    write = client.post(f"{api}openenv/echo_env/validations/", {}, content_type="application/json")
    assert write.status_code == 308 and write["Location"] == f"{api}someone/Echo-Renamed/validations/"
    for fmt in ("svg", "json"):
        badge = moved(f"/badges/openenv/echo_env/conformance.{fmt}?style=flat",
                      f"/badges/someone/Echo-Renamed/conformance.{fmt}?style=flat")
        assert "max-age" in badge["Cache-Control"]
        assert client.get(badge["Location"]).status_code == 200
    # Names nothing ever had are still unknown.
    assert client.get("/environments/openenv/never_there/").status_code == 404
    assert client.get(f"{api}openenv/never_there/").status_code == 404
    assert client.get("/badges/openenv/never_there/conformance.svg").status_code == 200

    # The reconcile agrees: nothing new, nothing withdrawn, no second environment under either name.
    summary = services.hub_sync().run
    assert (summary.new, summary.withdrawn, summary.errors) == (0, 0, 0)
    assert Environment.objects.count() == 1 and env(new).status == "active"
    # A replayed move changes nothing more.
    response, jobs = deliver(move)
    assert response.status_code == 202 and run(*jobs) == ["done"]
    assert OwnerAction.objects.count() == 1 and EnvironmentAlias.objects.count() == 1 and env(new).pk == e.pk


def test_a_move_handled_after_the_reconcile_saw_it_keeps_both_histories(hook, deliver):
    sha = push(hook)
    run(*deliver(payload(hook, sha=sha))[1])
    move = payload(hook, action="move", scope="repo", moved_to="someone/echo")
    hook.move_space(ECHO, "someone/echo")
    services.hub_sync()  # the reconcile ran first: a new Space, and the old one gone
    assert env("someone/echo").status == "active" and env(ECHO).status == "withdrawn"
    response, jobs = deliver(move)
    assert run(*jobs) == ["done"]
    assert env("someone/echo").status == "active" and env(ECHO).status == "withdrawn"
    assert Environment.objects.count() == 2 and not EnvironmentAlias.objects.exists()
    assert "already indexed as another environment" in delivery(jobs[0]).outcome


def test_a_move_the_hub_does_not_confirm_renames_nothing(hook, deliver):
    sha = push(hook)
    run(*deliver(payload(hook, sha=sha))[1])
    response, jobs = deliver(payload(hook, action="move", scope="repo", moved_to="someone/elsewhere"))
    assert run(*jobs) == ["done"]
    e = env(ECHO)
    assert e.status == "active" and e.repo_id == ECHO
    assert not EnvironmentAlias.objects.exists() and not OwnerAction.objects.exists()


def test_a_private_flip_withdraws_and_public_again_brings_it_back(hook, deliver):
    sha = push(hook)
    run(*deliver(payload(hook, sha=sha))[1])
    for flip in range(2):  # the second private flip repeats the first delivery exactly: it is handled again
        hook.set_private(ECHO, True)
        response, jobs = deliver(payload(hook, scope="repo.config", private=True))
        assert response.status_code == 202 and run(*jobs) == ["done"], flip
        assert env(ECHO).status == "withdrawn", flip
        hook.set_private(ECHO, False)
        response, jobs = deliver(payload(hook, scope="repo.config", private=False))
        assert response.status_code == 202 and run(*jobs) == ["done"], flip
        e = env(ECHO)
        assert e.status == "active" and e.head.sha == sha and e.revisions.count() == 1, flip


# --- what is refused or ignored -----------------------------------------------------------------------------------


def test_bad_bodies_get_a_clear_4xx_are_recorded_and_break_nothing(hook, deliver, settings):
    settings.HUB_WEBHOOK_MAX_BYTES = 2048
    sha = push(hook)
    good = payload(hook, sha=sha)
    cases = [
        (b"{not json", 400, "parse_error"),
        (b"\xff\xfe{}", 400, "parse_error"),
        (b"", 400, "parse_error"),
        (b"[" * 2000 + b"]" * 0, 400, "parse_error"),
        (b"[1, 2]", 422, "invalid"),
        (json.dumps({"repo": good["repo"]}), 422, "invalid"),
        (json.dumps({**good, "event": {"action": 5, "scope": "repo"}}), 422, "invalid"),
        (json.dumps({**good, "repo": {**good["repo"], "name": "../../etc"}}), 422, "invalid"),
        (json.dumps({**good, "repo": {**good["repo"], "headSha": "HEAD"}}), 422, "invalid"),
        (json.dumps({**good, "repo": {**good["repo"], "name": "a/b\x00c"}}), 422, "invalid"),
        (json.dumps({**good, "updatedRefs": "main"}), 422, "invalid"),
        (json.dumps(payload(hook, action="move", scope="repo")), 422, "invalid"),
        (json.dumps({**good, "pad": "x" * 2048}), 413, "too_large"),
    ]
    for raw, status, code in cases:
        response, jobs = deliver(raw=raw)
        assert response.status_code == status, (raw[:40], response.content)
        error = response.json()["error"]
        assert error["code"] == code and error["message"] and jobs == [], raw[:40]
    rows = WebhookDelivery.objects.order_by("id")
    assert [(r.status, r.http_status) for r in rows] == [("refused", status) for _, status, _ in cases]
    assert rows.filter(http_status=422, action="update", repo_name=ECHO).exists()  # what could be read is kept
    assert not Environment.objects.exists() and hook.count() == 0
    # Exactly at the cap is not too large; and the next good delivery is handled as ever.
    body = json.dumps(good)
    exact = json.dumps({**good, "pad": "x" * (2048 - len(body) - len(', "pad": ""'))}).encode()
    assert len(exact) == 2048
    response, jobs = deliver(raw=exact)
    assert response.status_code == 202 and run(*jobs) == ["done"] and env(ECHO).head.sha == sha


def test_other_scopes_repo_types_and_actions_are_acknowledged_and_ignored(hook, deliver):
    sha = push(hook)
    cases = [
        payload(hook, scope="discussion", action="create"),
        payload(hook, scope="discussion.comment", action="create"),
        payload(hook, "openenv/a-model", repo_type="model", sha=sha),
        payload(hook, "openenv/a-dataset", repo_type="dataset", action="delete", scope="repo"),
        payload(hook, action="archive", scope="repo"),
    ]
    for body in cases:
        response, jobs = deliver(body)
        assert response.status_code == 200 and jobs == [], body["event"]
        answer = response.json()
        assert answer["status"] == "ignored" and answer["reason"]
    rows = WebhookDelivery.objects.order_by("id")
    assert set(rows.values_list("status", "http_status")) == {("ignored", 200)}
    assert "Only Spaces" in rows[2].outcome and rows[2].repo_type == "model"
    assert not Environment.objects.exists() and hook.count() == 0


# --- operating it -------------------------------------------------------------------------------------------------


def test_the_delivery_log_is_for_staff_only(hook, deliver, client):
    sha = push(hook)
    pk = deliver(payload(hook, sha=sha))[0].json()["delivery"]
    run(pk)
    url = "/admin/registry/webhookdelivery/"
    assert client.get(url).status_code == 302  # to the admin's sign-in
    client.force_login(User.objects.create_user("reader"))
    assert client.get(url).status_code == 302
    staff = User.objects.create_user("ops", is_staff=True)
    client.force_login(staff)
    assert client.get(url).status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="view_webhookdelivery"))
    page = client.get(url)
    assert page.status_code == 200 and ECHO.encode() in page.content and sha[:12].encode() in page.content
    detail = client.get(f"{url}{pk}/change/")
    assert detail.status_code == 200 and b"new environment" in detail.content
    assert b'name="_save"' not in detail.content
    assert client.get(f"{url}add/").status_code == 403
    assert client.post(f"{url}{pk}/delete/", {"post": "yes"}).status_code == 403
    assert WebhookDelivery.objects.filter(pk=pk).exists()


def test_only_the_newest_deliveries_are_kept(hook, deliver, settings):
    settings.HUB_WEBHOOK_KEEP = 5
    sha = push(hook)
    pending = deliver(payload(hook, sha=sha))[0].json()["delivery"]  # queued: its job may still come
    for n in range(8):
        deliver(payload(hook, scope="discussion", action="create", webhook_id=f"w{n}"))
    kept = list(WebhookDelivery.objects.order_by("id").values_list("id", flat=True))
    assert len(kept) == 6 and kept[0] == pending
    newest = list(WebhookDelivery.objects.exclude(pk=pending).order_by("-id").values_list("id", flat=True)[:5])
    assert sorted(kept[1:]) == sorted(newest)
    run(pending)  # handled, it is pruned like the rest by the next delivery
    deliver(payload(hook, scope="discussion", action="create"))
    assert WebhookDelivery.objects.count() == 5 and not WebhookDelivery.objects.filter(pk=pending).exists()


def test_a_delivery_whose_job_was_lost_is_taken_over(hook, deliver, settings):
    sha = push(hook)
    lost = deliver(payload(hook, sha=sha))[0].json()["delivery"]
    WebhookDelivery.objects.filter(pk=lost).update(
        received_at=timezone.now() - timedelta(seconds=settings.CELERY_VISIBILITY_TIMEOUT_S + 3601))
    response, jobs = deliver(payload(hook, sha=sha))
    assert response.status_code == 202 and jobs == [response.json()["delivery"]]
    assert delivery(lost).status == "failed" and delivery(lost).claim is None
    assert run(*jobs) == ["done"] and env(ECHO).head.sha == sha


def test_the_task_follows_the_conventions(settings):
    task = tasks.handle_webhook
    assert task.name == webhooks.HANDLE_TASK == "registry.handle_webhook"
    assert task.acks_late and task.reject_on_worker_lost and task.ignore_result
    assert task.soft_time_limit < task.time_limit < settings.CELERY_VISIBILITY_TIMEOUT_S
    call_command("check")  # the visibility-timeout check includes it
    settings.CELERY_VISIBILITY_TIMEOUT_S = task.time_limit
    from django.core.management.base import SystemCheckError

    with pytest.raises(SystemCheckError, match="registry.handle_webhook may run"):
        call_command("check")
    assert run(123456789) == ["ignored"]  # no such delivery


# --- with real transactions: the broker, a live server, a worker --------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_broker_that_refuses_the_job_fails_the_delivery_and_frees_it(hook, client):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    saved = app.conf.broker_url

    def use(url: str) -> None:
        app.conf.broker_url = url
        app._pool = None
        app.amqp._producer_pool = None

    sha = push(hook)
    use(f"redis://127.0.0.1:{closed}/0")
    try:
        response = post(client, payload(hook, sha=sha))
    finally:
        use(saved)
    assert response.status_code == 503 and response.json()["error"]["code"] == "unavailable"
    row = WebhookDelivery.objects.get()
    assert row.status == "failed" and row.http_status == 503 and row.claim is None and "reconcile" in row.outcome
    response = post(client, payload(hook, sha=sha))  # the Hub's replay, once the broker is back
    assert response.status_code == 202


@pytest.mark.django_db(transaction=True)
def test_a_burst_of_500_identical_deliveries_leaves_one_index_job(hook, live_server, tmp_path):
    sha = push(hook)
    body = json.dumps(payload(hook, sha=sha)).encode()

    def send(_):
        request = urllib.request.Request(live_server.url + URL, data=body, method="POST", headers={
            "Content-Type": "application/json", "X-Webhook-Secret": SECRET})
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    log = tmp_path / "worker.log"
    with celery_worker(env={"HUB_VALIDATE_NEW_REVISIONS": "false"}, log=log):
        with ThreadPoolExecutor(max_workers=16) as pool:
            answers = list(pool.map(send, range(500)))
        wait_for(lambda: WebhookDelivery.objects.exclude(status__in=["queued", "duplicate"]).exists(), timeout=120,
                 what=f"the one job to be handled (worker log: {log})")
    assert Counter(status for status, _ in answers) == {202: 1, 200: 499}, answers[:3]
    queued = [answer["delivery"] for status, answer in answers if status == 202]
    assert {answer.get("duplicate_of") for status, answer in answers if status == 200} == set(queued)
    assert Counter(WebhookDelivery.objects.values_list("status", flat=True)) == {"done": 1, "duplicate": 499}
    assert SyncRun.objects.filter(kind="space", target=ECHO).count() == 1  # one index job ran
    assert env(ECHO).head.sha == sha and Revision.objects.count() == 1
