"""The discovery catalog against a real database: GET /api/v1/catalog.json, checked against the installed openenv
package's own schemas and loader, and `import_catalog` (a snapshot imported whole or not at all, idempotently)."""

from __future__ import annotations

import http.server
import json
import re
import subprocess
import threading
from pathlib import Path

import pytest
from django.core.management import call_command
from jsonschema import Draft202012Validator

from registry import discovery, services
from registry.models import Environment, IndexProblem, Revision
from registry.services.discovery import CatalogRefused, catalog_import, catalog_read

pytestmark = pytest.mark.django_db
URL = "/api/v1/catalog.json"
SHA = "0123456789abcdef0123456789abcdef01234567"


def openenv_dir(openenv_python: str) -> Path:
    """The installed openenv package of the sandbox venv (not our vendored copy)."""
    code = "import openenv, pathlib; print(pathlib.Path(openenv.__file__).parent)"
    out = subprocess.run([openenv_python, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    return Path(out.stdout.strip())


def in_openenv(openenv_python: str, code: str, *args: str) -> str:
    """Run `code` with openenv's own modules (sys.argv[1:] = args); its stdout."""
    out = subprocess.run([openenv_python, "-W", "ignore", "-c", code, *args], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def export(client, **headers):
    return client.get(URL, **headers)


def tables() -> list:
    """Everything an import may write, to compare before and after."""
    return [list(Environment.objects.order_by("pk").values()), list(Revision.objects.order_by("pk").values()),
            list(IndexProblem.objects.order_by("pk").values())]


def empty_index() -> None:
    """Another state of the index: nothing in it (rows are never deleted in production; a test may)."""
    Environment.objects.update(head=None, verdict_run=None, good_run=None)
    IndexProblem.objects.all().delete()
    Revision.objects.all().delete()
    Environment.objects.all().delete()


def installed_schema(openenv_python: str, name: str) -> dict:
    return json.loads((openenv_dir(openenv_python) / "discovery" / "schemas" / "0.1-draft" / name).read_text())


def schema_errors(instance, schema) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}"
            for e in Draft202012Validator(schema).iter_errors(instance)]


# --- the vendored schema ------------------------------------------------------------------------------------------


def test_the_vendored_schema_is_the_installed_packages_byte_for_byte(openenv_python):
    installed = openenv_dir(openenv_python) / "discovery" / "schemas" / "0.1-draft"
    vendored = sorted(Path(discovery.SCHEMA_FILE).parent.iterdir())
    assert [p.name for p in vendored] == ["catalog.schema.json"]
    for path in vendored:
        assert path.read_bytes() == (installed / path.name).read_bytes(), f"{path.name} differs from openenv's"


# --- the export ---------------------------------------------------------------------------------------------------


@pytest.fixture
def indexed(corpus_stub, tiny_envs):
    """The 34 Spaces of the stand-in and the two local folders of tiny_envs, indexed."""
    summary = services.hub_sync()
    assert summary.run.errors == 0 and Environment.objects.filter(status="active").count() == 36
    return summary


def test_the_export_lists_every_active_environment_and_validates_against_the_installed_schemas(
        client, indexed, openenv_python, settings, tmp_path):
    response = export(client)
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert response["Cache-Control"] == "public, max-age=300"
    snapshot = json.loads(response.content)
    assert response["ETag"] == f'"{snapshot["digest"].removeprefix("sha256:")}"'
    assert snapshot["complete"] is True and snapshot["issues"] == []
    assert len(snapshot["entries"]) == 36 and snapshot["inventory"]["paths"] == sorted(
        Environment.objects.values_list("key", flat=True))
    providers = [e["data"]["source"]["provider"] for e in snapshot["entries"]]
    assert providers.count("huggingface") == 34 and providers.count("local") == 2

    # Our profile is the installed package's schema with three values widened, and the export follows it.
    schema = installed_schema(openenv_python, "catalog.schema.json")
    assert schema_errors(snapshot, discovery.hub_profile_schema(schema)) == []
    # The stock schema refuses it for exactly that: the providers and the generator it does not know.
    refused = {re.sub(r"/\d+/", "/*/", e.split(":")[0]) for e in schema_errors(snapshot, schema)}
    assert refused == {"source/provider", "generator/name", "entries/*/data/source/provider"}
    # Each card is a stock card but for its provider.
    card_schema = installed_schema(openenv_python, "environment-card.schema.json")
    for entry in snapshot["entries"]:
        card = entry["data"] | {"source": entry["data"]["source"] | {"provider": "github"}}
        assert schema_errors(card, card_schema) == [], entry["identifier"]

    # The digest is openenv's own catalog_digest over the same content.
    digest = in_openenv(openenv_python, (
        "import json, sys\n"
        "from openenv.discovery.models import CatalogSnapshot\n"
        "from openenv.discovery.serialization import catalog_digest\n"
        "doc = json.load(open(sys.argv[1]))\n"
        "print(catalog_digest(CatalogSnapshot.model_construct(**doc)))\n"), _saved(response.content, tmp_path))
    assert digest.strip() == snapshot["digest"]

    echo = next(e for e in snapshot["entries"] if e["data"]["source"]["id"] == "openenv/echo_env")
    env = Environment.objects.select_related("head").get(key="openenv/echo_env")
    assert echo["data"]["source"]["revision"] == env.head.sha
    assert echo["data"]["manifest_spec_version"] == 1  # the manifest's own type, read in SQL without the manifest
    assert echo["metadata"]["huggingface"]["pip"].endswith(f"/spaces/openenv/echo_env@{env.head.sha}")
    assert echo["metadata"]["openenv-hub"]["page"] == f"{settings.SITE_URL}/environments/openenv/echo_env/"


def _saved(content: bytes, folder: Path) -> str:
    path = folder / "export.json"
    path.write_bytes(content)
    return str(path)


def test_withdrawn_environments_leave_the_snapshot_and_the_etag_moves(client, indexed):
    first = export(client)
    assert export(client, HTTP_IF_NONE_MATCH=first["ETag"]).status_code == 304
    assert export(client, HTTP_IF_NONE_MATCH=f'"other", {first["ETag"]}').status_code == 304
    services.environment_withdraw(environment=Environment.objects.get(key="openenv/echo_env"), reason="test")
    second = export(client, HTTP_IF_NONE_MATCH=first["ETag"])
    assert second.status_code == 200 and second["ETag"] != first["ETag"]
    snapshot = json.loads(second.content)
    assert snapshot["complete"] is True and len(snapshot["entries"]) == 35
    assert "openenv/echo_env" not in snapshot["inventory"]["paths"]


def test_the_export_costs_one_query_whatever_the_size(client, tiny_envs, django_assert_num_queries):
    with django_assert_num_queries(1):
        assert export(client).status_code == 200


def test_an_environment_without_a_revision_makes_the_snapshot_partial(client, tiny_envs):
    services.environment_get_or_create(source="local", owner="local", name="gamma")
    snapshot = json.loads(export(client).content)
    assert snapshot["complete"] is False and [i["path"] for i in snapshot["issues"]] == ["local/gamma"]


# URN_AIR_IDENTIFIER_RE of huggingface/hf-discover src/discover/models.py (HEAD 49c9274), copied.
_URN_AIR_BODY = (
    r"(?P<publisher>(?=.{1,253}:)(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+"
    r"[A-Za-z]{2,63})"
    r":[A-Za-z0-9._~!$&'()*+,;=@%-]+"
    r"(?::[A-Za-z0-9._~!$&'()*+,;=@%-]+)*$"
)
URN_AIR_IDENTIFIER_RE = re.compile(r"^urn:air:" + _URN_AIR_BODY)


def test_hf_discover_reads_the_export(client, indexed):
    """What hf-discover does with a catalog document (src/discover/navigation.py: fetch_json, catalog_entries,
    _static_result; src/discover/models.py: CatalogEntry): at most MAX_RESPONSE_BYTES, a JSON object, `entries` a
    list, each entry a domain-anchored urn:air identifier with displayName and type, exactly one of url or data,
    and the text its lexical search reads."""
    response = export(client, HTTP_ACCEPT="application/json")
    assert len(response.content) <= 2_000_000  # navigation.MAX_RESPONSE_BYTES
    catalog = json.loads(response.content.decode("utf-8"))
    assert isinstance(catalog, dict) and isinstance(catalog.get("entries", []), list)
    for entry in catalog["entries"]:
        assert URN_AIR_IDENTIFIER_RE.fullmatch(entry["identifier"]), entry["identifier"]
        assert URN_AIR_IDENTIFIER_RE.fullmatch(entry["identifier"])["publisher"] == catalog["publisher"]
        assert isinstance(entry["displayName"], str) and isinstance(entry["type"], str)
        assert ("url" in entry) != ("data" in entry) and isinstance(entry["data"], dict)
        assert isinstance(entry["description"], str) and isinstance(entry["metadata"], dict)
        for key in ("tags", "capabilities", "representativeQueries"):
            assert all(isinstance(v, str) for v in entry[key])
    haystacks = [" ".join([e["displayName"], e["description"], *e["tags"], *e["capabilities"],
                           *e["representativeQueries"]]).casefold() for e in catalog["entries"]]
    assert any("echo" in h for h in haystacks)
    # And the consumer-side refusals openenv's require_complete makes (a partial or altered snapshot is not served
    # as a catalog): the export passes them.
    discovery.check_snapshot(catalog)


# --- import -------------------------------------------------------------------------------------------------------


def test_a_snapshot_exported_from_one_index_imports_into_another_and_exports_the_same(client, indexed):
    exported = export(client).content
    empty_index()
    assert json.loads(export(client).content)["entries"] == []

    result = catalog_import(data=exported)
    assert len(result.created) == 36 and not (result.updated or result.skipped or result.unpinned)
    echo = Environment.objects.select_related("head").get(key="openenv/echo_env")
    original = next(e for e in json.loads(exported)["entries"] if e["displayName"] == "echo_env")
    assert (echo.source, echo.source_provider, echo.source_path) == ("catalog", "huggingface", ".")
    assert echo.source_uri.endswith("/spaces/openenv/echo_env") and echo.head.sha == echo.source_revision
    assert echo.head.sha == original["data"]["source"]["revision"] and echo.validation_runs.count() == 0
    alpha = Environment.objects.select_related("head").get(key="local/alpha")
    assert alpha.source_provider == "local" and len(alpha.head.sha) == 64 and alpha.local_path == ""
    # Imported environments are in the catalog like the others, and the export of this index is the same bytes.
    assert "echo_env" in client.get("/environments/?q=echo").content.decode()
    assert f"/spaces/openenv/echo_env@{echo.head.sha}" in client.get("/environments/openenv/echo_env/").content.decode()
    assert export(client).content == exported

    before = tables()
    again = catalog_import(data=exported)
    assert len(again.unchanged) == 36 and again.line().startswith("created 0, updated 0, unchanged 36, withdrawn 0")
    assert tables() == before


def test_an_entry_already_indexed_from_another_source_is_left_alone(client, tiny_envs):
    exported = export(client).content
    before = tables()
    result = catalog_import(data=exported)
    assert result.skipped == [f"local/{n}: already indexed from Local source; the entry was not imported."
                              for n in ("alpha", "beta")]
    assert tables() == before


def _snapshot_with(change=None, **kw) -> bytes:
    envs = [discovery.CatalogEnvironment(owner="remote", name=n, source="local", revision="ab" * 32,
                                         page_url=f"https://far.example.org/environments/remote/{n}/")
            for n in ("one", "two")]
    snapshot = discovery.build_snapshot(publisher="far.example.org", catalog_url="https://far.example.org/c.json",
                                        environments=envs, **kw)
    if change:
        change(snapshot)
    return json.dumps(snapshot).encode()


def _redigest(snapshot: dict) -> None:
    snapshot["digest"] = discovery.snapshot_digest(snapshot)


@pytest.mark.parametrize(("change", "message"), [
    (lambda s: s["entries"][0].update(description="Altered."), "The snapshot's digest sha256:"),
    (lambda s: (s["entries"][0]["data"].pop("license"), _redigest(s)),
     "The snapshot does not follow the openenv-hub catalog schema at entries/0/data: 'license' is a required"),
    (lambda s: (s["entries"].pop(), s["issues"].append({"path": "remote/two", "code": "unreadable",
                                                        "message": "Could not read it.", "severity": "error"}),
                s.update(complete=False), _redigest(s)),
     "The snapshot is partial (complete is false): 1 of the 2 environments it inventories are not in it."),
])
def test_a_snapshot_that_fails_a_check_imports_nothing_and_says_why_in_one_sentence(
        tmp_path, capsys, tiny_envs, change, message):
    path = tmp_path / "snapshot.json"
    path.write_bytes(_snapshot_with(change))
    before = tables()
    with pytest.raises(SystemExit) as exited:
        call_command("import_catalog", str(path))
    assert exited.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"Not imported: {message}") and "\n" not in err
    assert tables() == before


def test_a_later_complete_snapshot_withdraws_what_it_no_longer_lists(capsys, tmp_path):
    path = tmp_path / "snapshot.json"
    path.write_bytes(_snapshot_with())
    call_command("import_catalog", str(path))
    assert "created 2, updated 0, unchanged 0, withdrawn 0" in capsys.readouterr().out
    path.write_bytes(_snapshot_with(lambda s: (s["entries"].pop(), s["inventory"]["paths"].pop(), _redigest(s))))
    call_command("import_catalog", str(path))
    assert "created 0, updated 0, unchanged 1, withdrawn 1" in capsys.readouterr().out
    two = Environment.objects.get(key="remote/two")
    assert two.status == "withdrawn" and two.status_reason == "No longer in the catalog of far.example.org."
    path.write_bytes(_snapshot_with())
    call_command("import_catalog", str(path))
    assert "created 0, updated 1, unchanged 1, withdrawn 0" in capsys.readouterr().out
    assert Environment.objects.get(key="remote/two").status == "active"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def _openenv_repository(root: Path) -> Path:
    """A git repository laid out as openenv's catalog producer expects: envs/<name>/openenv.yaml and friends."""
    for name, description in (("maze", "Find the way out of a maze."), ("chess", "Play chess against a bot.")):
        folder = root / "envs" / name
        folder.mkdir(parents=True)
        (folder / "openenv.yaml").write_text(f"spec_version: 1\nname: {name}\ndescription: {description}\n")
        (folder / "pyproject.toml").write_text(
            f'[project]\nname = "{name}"\nlicense = "bsd-3-clause"\ndependencies = ["openenv[core]>=0.2.2"]\n')
        (folder / "README.md").write_text(f"---\ntags: [openenv, {name}]\n---\n# {name}\n")
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-qm", "environments")
    return root


BUILD = (
    "import sys\n"
    "from openenv.discovery import build_catalog, write_catalog\n"
    "write_catalog(build_catalog(sys.argv[1], repository_uri='https://github.com/acme/envs.git',"
    " publisher='acme.org'), sys.argv[2])\n"
)
LOAD = (
    "import sys\n"
    "from openenv.discovery import load_catalog, search_catalog\n"
    "s = load_catalog(sys.argv[1])\n"
    "print(s.digest, len(s.entries), s.complete, search_catalog(s, 'maze')[0].entry.identifier)\n"
)


def test_openenvs_own_snapshot_imports_and_the_export_is_a_stock_snapshot_openenv_loads(
        client, tmp_path, openenv_python, settings):
    settings.HUB_CATALOG_PUBLISHER = "hub.example.org"
    repo = _openenv_repository(tmp_path / "repo")
    produced = tmp_path / "acme.json"
    in_openenv(openenv_python, BUILD, str(repo), str(produced))
    original = json.loads(produced.read_text())

    call_command("import_catalog", str(produced))
    maze = Environment.objects.select_related("head").get(key="acme/maze")
    commit = _git(repo, "rev-parse", "HEAD")
    assert (maze.source, maze.source_provider, maze.source_path, maze.source_revision) == (
        "catalog", "github", "envs/maze", commit)
    assert maze.source_uri == "https://github.com/acme/envs.git" and maze.head.sha == commit
    assert maze.head.manifest_name == "maze" and maze.head.openenv_requirement == "openenv[core]>=0.2.2"
    page = client.get("/environments/acme/maze/").content.decode()  # its pull block points at its repository
    assert f"git+https://github.com/acme/envs.git@{commit}#subdirectory=envs/maze" in page
    assert "hf.space" not in page
    forms = client.get("/api/v1/environments/acme/maze/").json()["pull_forms"]  # the API says the same
    pip = next(f["text"] for f in forms if f["kind"] == "pip")
    assert pip == f"pip install 'git+https://github.com/acme/envs.git@{commit}#subdirectory=envs/maze'"
    assert not any("hf.space" in f["text"] for f in forms)

    response = export(client)
    snapshot = json.loads(response.content)
    assert snapshot["generator"] == discovery.STOCK_GENERATOR and snapshot["source"] == original["source"]
    assert snapshot["inventory"] == original["inventory"]
    assert [e["data"] for e in snapshot["entries"]] == [e["data"] for e in original["entries"]]
    assert [e["identifier"] for e in snapshot["entries"]] == [
        e["identifier"].replace("urn:air:acme.org:", "urn:air:hub.example.org:") for e in original["entries"]]
    # Unchanged stock profile: the installed schema as it is, and openenv's own loader (schema, rules, complete,
    # digest) and search.
    assert schema_errors(snapshot, installed_schema(openenv_python, "catalog.schema.json")) == []
    digest, count, complete, found = in_openenv(openenv_python, LOAD, _saved(response.content, tmp_path)).split()
    maze_id = next(e["identifier"] for e in snapshot["entries"] if e["displayName"] == "maze")
    assert (digest, count, complete, found) == (snapshot["digest"], "2", "True", maze_id)

    # A new commit that drops chess: a refresh of the same scope withdraws it and moves maze.
    _git(repo, "rm", "-rq", "envs/chess")
    _git(repo, "commit", "-qm", "no chess")
    in_openenv(openenv_python, BUILD, str(repo), str(produced))
    before = Revision.objects.count()
    call_command("import_catalog", str(produced))
    maze.refresh_from_db()
    assert maze.source_revision == _git(repo, "rev-parse", "HEAD") and maze.head.sha == maze.source_revision
    assert Environment.objects.get(key="acme/chess").status == "withdrawn"
    assert Revision.objects.count() == before + 1


class _Serving(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self):
        if self.path == "/away":
            self.send_response(302)
            self.send_header("Location", f"http://localhost:{self.server.server_port}/snapshot.json")
        elif self.path == "/here":
            self.send_response(301)
            self.send_header("Location", "/snapshot.json")
        elif self.path == "/snapshot.json":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
        else:
            self.send_response(404)
        self.end_headers()
        if self.path == "/snapshot.json":
            self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.mark.integration
def test_a_snapshot_is_read_from_a_url_with_a_cap_and_no_redirect_to_another_host():
    _Serving.body = _snapshot_with()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Serving)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        assert catalog_read(location=f"{base}/here") == _Serving.body
        with pytest.raises(CatalogRefused, match=r"redirects to another host \(localhost:\d+\); not followed\.$"):
            catalog_read(location=f"{base}/away")
        with pytest.raises(CatalogRefused, match=r"is larger than the 0 MiB a snapshot may be\.$"):
            catalog_read(location=f"{base}/snapshot.json", max_bytes=100)
        with pytest.raises(CatalogRefused, match=r"answered HTTP 404\.$"):
            catalog_read(location=f"{base}/nothing")
        call_command("import_catalog", f"{base}/snapshot.json")
        assert Environment.objects.filter(source="catalog").count() == 2
    finally:
        server.shutdown()
        server.server_close()
