"""The discovery API and the web pages, over Django's test client on the real database."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.request import Request
from rest_framework.serializers import ModelSerializer
from rest_framework.test import APIRequestFactory

from registry import selectors, services
from registry.api.serializers import EnvironmentSerializer
from registry.models import Environment
from tests.registry.test_pages import finish

pytestmark = pytest.mark.django_db


@pytest.fixture
def client():
    return Client(HTTP_HOST="localhost")


@pytest.fixture
def indexed(corpus_stub):
    corpus_stub.put_space("evil/broken", {"openenv.yaml": b"name: [oops\n",
                                          "README.md": b"---\ntags: [openenv]\n---\n<script>alert('x')</script> Hi.\n"},
                          tags=["openenv", "region:us"])
    services.hub_sync()
    corpus_stub.delete_space("openenv/atari_env")
    services.hub_sync()
    return corpus_stub


def test_list_shape_and_cursor_pagination(client, indexed):
    response = client.get("/api/v1/environments/?page_size=10")
    body = response.json()
    assert set(body) == {"next", "results"} and len(body["results"]) == 10
    assert "cursor=" in body["next"] and response["Link"] == f'<{body["next"]}>; rel="next"'
    item = body["results"][0]
    for key in ("id", "owner", "name", "source", "status", "head_sha", "manifest_name", "description", "tags",
                "updated_at", "changed_at", "index_errors", "verdict", "page_url"):
        assert key in item
    ids = []
    url = "/api/v1/environments/?page_size=10"
    while url:
        page = client.get(url).json()
        ids += [r["id"] for r in page["results"]]
        url = page["next"]
    assert len(ids) == len(set(ids)) == 34  # 35 indexed, one withdrawn
    assert ids == sorted(ids, key=str.lower)  # without a search, by name


def test_list_items_written_out_are_what_the_generic_serializer_makes(indexed, django_assert_num_queries):
    """The list writes its items out by hand (for speed): for every kind of item, the same dict, in the same
    order, as DRF's generic walk over the declared fields."""
    finish(Environment.objects.get(name="echo_env"), "pass", mcp=True, p50=0.012)
    finish(Environment.objects.get(name="chess_env"), "fail")
    Environment.objects.filter(name="coding_env").update(
        deprecated_at=timezone.now(), deprecation_reason="Use echo.",
        successor=Environment.objects.get(name="echo_env"))
    Environment.objects.filter(name="maze_env").update(deprecated_at=timezone.now(), has_mcp=False)
    Environment.objects.create(source="huggingface", owner="openenv", name="headless", updated_at=timezone.now())
    envs = selectors.environment_cards(list(Environment.objects.order_by("key").values_list("pk", flat=True)))
    assert {e.status for e in envs} == {"active", "withdrawn"} and any(e.verdict_run for e in envs)
    assert any(e.head is None for e in envs) and any(e.deprecated_at for e in envs)
    serializer = EnvironmentSerializer(context={"request": Request(APIRequestFactory().get("/api/v1/environments/"))})
    with django_assert_num_queries(0):  # the cards hold all an item shows, the successor's name too
        items = {env.repo_id: serializer.to_representation(env) for env in envs}
    assert items["openenv/coding_env"]["deprecated"]["successor"] == "openenv/echo_env"
    for env in envs:
        generic = ModelSerializer.to_representation(serializer, env)
        assert list(items[env.repo_id].items()) == list(generic.items()), env.repo_id


def test_list_item_values(client, indexed):
    results = {r["id"]: r for r in client.get("/api/v1/environments/?page_size=100").json()["results"]}
    echo = results["openenv/echo_env"]
    assert echo["owner"] == "openenv" and echo["name"] == "echo_env" and echo["source"] == "huggingface"
    assert echo["status"] == "active" and len(echo["head_sha"]) == 40
    assert echo["manifest_name"] == "echo_env" and echo["description"].startswith("A simple test environment")
    assert "openenv" in echo["tags"] and not any(t.startswith("region:") for t in echo["tags"])
    assert echo["index_errors"] == []
    broken = results["evil/broken"]
    assert [e["code"] for e in broken["index_errors"]] == ["manifest.yaml_invalid"]
    assert "not valid YAML" in broken["index_errors"][0]["message"]


def test_status_source_and_search_filters(client, indexed):
    withdrawn = client.get("/api/v1/environments/?status=withdrawn").json()
    assert [r["id"] for r in withdrawn["results"]] == ["openenv/atari_env"]
    assert withdrawn["results"][0]["status_reason"].startswith("Gone from the Hub")
    assert len(client.get("/api/v1/environments/?status=all&page_size=100").json()["results"]) == 35
    assert client.get("/api/v1/environments/?source=local").json()["results"] == []
    found = client.get("/api/v1/environments/?q=browsergym").json()
    # The catalog's search: the name match ranks first; READMEs that mention it follow.
    assert found["results"][0]["id"] == "openenv/browsergym_env"
    bad = client.get("/api/v1/environments/?status=bogus")
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "invalid" and "status" in bad.json()["error"]["detail"]


def test_detail_with_revisions_and_canonical_redirect(client, indexed):
    body = client.get("/api/v1/environments/openenv/echo_env/").json()
    assert body["id"] == "openenv/echo_env"
    assert body["manifest"]["name"] == "echo_env"
    assert [r["sha"] for r in body["revisions"]] == [body["head_sha"]]
    assert {"sha", "indexed_at"} <= set(body["revisions"][0])
    redirect = client.get("/api/v1/environments/OpenEnv/Echo_Env/")
    assert redirect.status_code == 301 and redirect["Location"] == "/api/v1/environments/openenv/echo_env/"
    withdrawn = client.get("/api/v1/environments/openenv/atari_env/").json()
    assert withdrawn["status"] == "withdrawn" and withdrawn["status_changed_at"]


def test_unknown_environment_gives_the_error_shape(client, db):
    response = client.get("/api/v1/environments/nobody/nothing/")
    assert response.status_code == 404
    assert response.json() == {"error": {"code": "not_found", "message": "No environment nobody/nothing in the index."}}


def test_the_environment_list_is_read_only(client, indexed):
    assert client.post("/api/v1/environments/", {}).status_code == 405  # nobody adds environments, signed in or not
    from django.contrib.auth.models import User
    User.objects.create_user("someone", password="pw", is_staff=True)
    client.login(username="someone", password="pw")
    assert client.post("/api/v1/environments/", {}).status_code == 405  # nobody adds environments here
    assert client.delete("/api/v1/environments/openenv/echo_env/").status_code == 405


def test_the_catalog_lists_environments_and_their_errors_escaped(client, indexed):
    page = client.get("/environments/?sort=name").content.decode()
    assert "openenv/</span>echo_env" in page
    assert "A simple test environment that echoes back messages." in page
    assert "atari_env" not in page  # withdrawn
    assert "<script>alert" not in page
    broken = client.get("/environments/evil/broken/").content.decode()
    assert "manifest.yaml_invalid" in broken and "not valid YAML" in broken
    search = client.get("/?q=browsergym")  # the header's search box, from the home page
    assert search.status_code == 302 and search["Location"] == "/environments/?q=browsergym"
    found = client.get(search["Location"]).content.decode()
    assert "browsergym_env" in found and "echo_env" not in found


def test_home_says_plainly_when_the_hub_could_not_be_reached(client, corpus_stub, settings):
    corpus_stub.inject("list", status=500, times=None)
    services.hub_sync()
    page = client.get("/").content.decode()
    assert f"The Hub ({settings.HF_ENDPOINT}) could not be reached at the last sync" in page
    assert "never reached yet" in page and "HTTP 500" not in page.split("could not be reached")[1].split("</p>")[0]
    corpus_stub.clear_injections()
    services.hub_sync()
    assert "could not be reached" not in client.get("/").content.decode()
    corpus_stub.inject("list", status=500, times=None)
    services.hub_sync()
    assert "last reached <time" in client.get("/").content.decode()


def test_environment_page(client, indexed):
    page = client.get("/environments/evil/broken/").content.decode()
    assert "manifest.yaml_invalid" in page and "<script>" not in page
    assert "name: [oops" in page
    gone = client.get("/environments/openenv/atari_env/").content.decode()
    assert "Withdrawn" in gone and "Gone from the Hub" in gone
    assert client.get("/environments/OPENENV/echo_env/").status_code == 301
    assert client.get("/environments/x/y/").status_code == 404


def test_healthz_and_readyz(client, db):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ok", "checks": {"database": "ok", "broker": "ok"}}


@pytest.mark.integration
def test_readyz_reports_a_dead_broker(client, db, settings):
    from hub.celery import app

    original = app.conf.broker_url
    app.conf.broker_url = "redis://127.0.0.1:1/0"
    try:
        response = client.get("/readyz")
    finally:
        app.conf.broker_url = original
    assert response.status_code == 503
    assert response.json()["checks"]["broker"].startswith("error")
    assert response.json()["checks"]["database"] == "ok"


def test_local_sources_are_indexed_and_withdrawn(settings, tmp_path, db):
    root = tmp_path / "envs"
    (root / "alpha").mkdir(parents=True)
    (root / "alpha" / "openenv.yaml").write_text("name: alpha\ndescription: First\n")
    (root / "beta").mkdir()
    (root / "beta" / "openenv.yaml").write_text("name: [broken\n")
    (root / "not_an_env").mkdir()
    settings.HUB_LOCAL_SOURCES = [f"acme={root}"]
    run = services.local_sync().run
    assert (run.found, run.new, run.errors) == (2, 2, 0)
    alpha = Environment.objects.get(key="acme/alpha")
    assert alpha.source == "local" and alpha.head.description == "First" and len(alpha.head.sha) == 64
    assert alpha.local_path == str(root / "alpha")
    assert Environment.objects.get(key="acme/beta").problems.get().code == "manifest.yaml_invalid"

    assert services.local_sync().run.unchanged == 2
    (root / "alpha" / "server.py").write_text("print('changed')\n")  # any file change is a new revision
    assert services.local_sync().run.updated == 1
    assert alpha.revisions.count() == 2

    (root / "beta" / "openenv.yaml").unlink()
    run = services.local_sync().run
    assert run.withdrawn == 1
    assert Environment.objects.get(key="acme/beta").status == "withdrawn"

    # A source that is briefly missing (an unmounted volume) withdraws nothing...
    root.rename(tmp_path / "unmounted")
    run = services.local_sync().run
    assert run.withdrawn == 0 and "is not a folder" in run.messages[0]
    assert Environment.objects.get(key="acme/alpha").status == "active"
    # ...but a source taken out of the configuration does.
    settings.HUB_LOCAL_SOURCES = []
    assert services.local_sync().run.withdrawn == 1


def test_two_local_sources_with_one_folder_name_do_not_flip_flop(settings, tmp_path, db):
    for source, description in (("one", "From one"), ("two", "From two")):
        (tmp_path / source / "echo").mkdir(parents=True)
        (tmp_path / source / "echo" / "openenv.yaml").write_text(f"name: echo\ndescription: {description}\n")
    settings.HUB_LOCAL_SOURCES = [str(tmp_path / "one"), str(tmp_path / "two")]
    settings.HUB_VALIDATE_NEW_REVISIONS = False
    first = services.local_sync().run
    assert (first.found, first.new, first.errors) == (2, 1, 1)
    assert "already indexed from an earlier local source" in first.messages[0]
    second = services.local_sync().run
    assert (second.updated, second.unchanged) == (0, 1)  # the first source wins, every time
    echo = Environment.objects.select_related("head").get(key="local/echo")
    assert echo.head.description == "From one" and echo.revisions.count() == 1
    assert echo.problems.get(resolved_at__isnull=True).code == "local.duplicate_name"


def test_admin_cannot_half_edit_an_environments_status(client, indexed):
    from django.contrib.auth.models import User
    User.objects.create_superuser("admin", password="pw")
    client.login(username="admin", password="pw")
    echo = Environment.objects.get(key="openenv/echo_env")
    page = client.get(f"/admin/registry/environment/{echo.pk}/change/")
    assert page.status_code == 200
    response = client.post(f"/admin/registry/environment/{echo.pk}/change/",
                           {"status": "withdrawn", "status_reason": "by hand"})
    assert response.status_code in (200, 302)
    echo.refresh_from_db()
    assert (echo.status, echo.status_reason) == ("active", "")  # the sync owns status, with its time and reason


def test_local_folders_whose_names_are_not_ids_are_skipped_with_a_message(settings, tmp_path, db, client):
    root = tmp_path / "envs"
    for name in ("good", "tab\tname", "q?x#y", "pct%2Fz", "é"):
        (root / name).mkdir(parents=True)
        (root / name / "openenv.yaml").write_text("name: x\n")
    settings.HUB_LOCAL_SOURCES = [str(root), f"a/b={root}"]
    settings.HUB_VALIDATE_NEW_REVISIONS = False
    run = services.local_sync().run
    assert run.new == 1 and list(Environment.objects.values_list("key", flat=True)) == ["local/good"]
    assert sum("is not a valid environment name" in m for m in run.messages) == 4
    assert any("owner 'a/b' is not a valid id part" in m for m in run.messages)
    assert client.get("/").status_code == 200


def test_every_api_error_has_the_api_shape(client, db):
    for path in ("/api/v1/", "/api/v1/nope/", "/api/v1/environments/a/b/c/d/", "/api/v1/environments/a%00/b/",
                 "/api/v1/environments/?format=xml"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert response.json()["error"]["code"] == "not_found", path
    assert client.get("/api/v1/nope").status_code == 301  # APPEND_SLASH, then the JSON 404 above
