"""The web catalog, page by page, through Django's test client on the real database: home, browse (search,
facets, sorts, pages, shareable URLs, bad parameters), the environment page (revisions, pull block, last
known good, schemas, tools, episode, report), owner and tag pages, 404 and 500, and what each costs."""

from __future__ import annotations

import hashlib
import re
import socket
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext

from registry import services, views
from registry.models import Environment, Revision, ValidationRun
from registry.services import validation

pytestmark = pytest.mark.django_db

POSTGRES = pytest.mark.skipif(connection.vendor != "postgresql",
                              reason="full-text search and trigrams are PostgreSQL's; CI runs this on PostgreSQL")

SCHEMA = {"type": "object", "properties": {
    "message": {"type": "string", "description": "What to echo.", "maxLength": 100},
    "mode": {"anyOf": [{"type": "string", "enum": ["loud", "quiet"]}, {"type": "null"}], "default": None},
}, "required": ["message"]}


def make_env(root: Path, name: str, *, description: str = "An environment.", tags=("openenv",),
             requirement: str = "openenv==0.10.0") -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "openenv.yaml").write_text(f"name: {name}\napp: server.app:app\nport: 8000\n")
    tag_lines = "".join(f"  - {t}\n" for t in tags)
    (folder / "README.md").write_text(f"---\ntags:\n{tag_lines}---\n# {name}\n\n{description}\n")
    (folder / "pyproject.toml").write_text(f'[project]\nname = "openenv-{name}"\ndependencies = ["{requirement}"]\n')
    return folder


def finish(env: Environment, outcome: str, *, mode: str = "simulation", mcp: bool = False, p50: float = 0.004,
           revision: Revision | None = None) -> ValidationRun:
    """A finished run of the environment's head (or `revision`), with a report and what the server showed."""
    run, _ = validation.validation_run_request(revision=revision or env.head, trigger="request")
    validation.validation_run_start(run_id=run.pk)
    report = {"verdict": outcome, "results": [
        {"check_id": "hub.http_mode", "status": "pass", "measured": {"mode": mode}, "evidence": [], "duration_s": 0},
        {"check_id": "hub.mcp_endpoint", "status": "pass", "measured": {"mcp": mcp}, "evidence": [], "duration_s": 0},
        *([{"check_id": "hub.mcp_tools", "status": "pass", "measured": {"tools": ["add", "divide"]},
            "evidence": [], "duration_s": 0}] if mcp else []),
        {"check_id": "hub.ws_episode", "status": "pass" if outcome == "pass" else "fail",
         "measured": {"step_latency_s": {"n": 5, "p50": p50}}, "evidence": ["reset + 5 steps"], "duration_s": 0.1},
    ]}
    observed = {
        "schemas": {"action": SCHEMA, "observation": SCHEMA, "state": {"type": "object", "properties": {
            "episode_id": {"type": "string"}, "step_count": {"type": "integer", "minimum": 0}}}},
        "tools": [{"name": "add", "description": "Adds two numbers.", "inputSchema": {
            "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a"]}}]
        if mcp else None,
        "episode": [
            {"op": "reset", "label": "reset", "observation": '{"echoed_message": ""}', "reward": None, "done": False},
            {"op": "step", "label": "step 1", "sent": '{"message": "hello"}',
             "observation": '{"echoed_message": "hello"}', "reward": 0.05, "done": False},
        ],
    }
    validation.validation_run_finish(run_id=run.pk, outcome=outcome, report=report, observed=observed)
    run.refresh_from_db()
    return run


@pytest.fixture
def catalog(settings, tmp_path):
    """Five local environments with verdicts, tags, modes and latencies that the facets and sorts can tell apart."""
    root = tmp_path / "envs"
    make_env(root, "chess_env", description="Play chess against a fixed engine.", tags=("openenv", "games", "chess"))
    make_env(root, "coding_env", description="Write Python that passes tests.", tags=("openenv", "coding"))
    make_env(root, "maze_env", description="Find the exit of a grid maze.", tags=("openenv", "games"))
    make_env(root, "calc_env", description="A calculator with MCP tools.", tags=("openenv", "mcp"),
             requirement="openenv-core>=0.2")
    make_env(root, "quiet_env", description="Never validated.", tags=("openenv",))
    settings.HUB_LOCAL_SOURCES = [f"local={root}"]
    settings.HUB_VALIDATE_NEW_REVISIONS = False
    services.local_sync()
    envs = {e.name: e for e in Environment.objects.select_related("head")}
    finish(envs["chess_env"], "pass", p50=0.002)
    finish(envs["coding_env"], "fail", mode="production")
    finish(envs["maze_env"], "pass", p50=0.009)
    finish(envs["calc_env"], "warn", mcp=True, p50=0.001)
    Environment.objects.filter(name="chess_env").update(likes=30)
    Environment.objects.filter(name="maze_env").update(likes=10)
    return root


def names(html: str) -> list[str]:
    return re.findall(r'<span class="owner">local/</span>(\w+)</a>', html)


class _Ids(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids = []

    def handle_starttag(self, tag, attrs):
        self.ids += [v for k, v in attrs if k == "id"]


# --- home -------------------------------------------------------------------------------------------------------

def test_home_counts_lists_and_publish_guide(client, catalog):
    page = client.get("/").content.decode()
    assert re.search(r"<strong>5</strong> environments", page) and re.search(r"<strong>1</strong> owners", page)
    assert re.search(r"<strong>2</strong> passing", page)
    assert "Recently updated" in page and "Recently validated" in page and "Most liked" in page
    liked = page.split('id="most-liked"')[1].split("</section>")[0]
    assert names(liked) == ["chess_env", "maze_env"]  # most liked first; nothing unliked
    assert "openenv push" in page and 'action="/environments/"' in page
    parser = _Ids()
    parser.feed(page)
    assert len(parser.ids) == len(set(parser.ids))  # ids are unique (labels point at one thing)


# --- browse -----------------------------------------------------------------------------------------------------

def test_browse_sorts(client, catalog):
    assert names(client.get("/environments/?sort=name").content.decode()) == [
        "calc_env", "chess_env", "coding_env", "maze_env", "quiet_env"]
    assert names(client.get("/environments/?sort=likes").content.decode())[:2] == ["chess_env", "maze_env"]
    latency = names(client.get("/environments/?sort=latency").content.decode())
    # p50 of the latest passing run: chess 2 ms, maze 9 ms; calc only warned and coding failed: unmeasured, last.
    assert latency[:2] == ["chess_env", "maze_env"] and set(latency[2:]) == {"calc_env", "coding_env", "quiet_env"}
    validated = names(client.get("/environments/?sort=validated").content.decode())
    assert validated[-1] == "quiet_env"  # never validated: last


def test_facets_filter_and_count_with_the_other_filters(client, catalog):
    page = client.get("/environments/?verdict=pass").content.decode()
    assert sorted(names(page)) == ["chess_env", "maze_env"]
    # The tag facet counts within the verdict filter: games 2 (both passing), coding 0 (so not shown)...
    tags = page.split("<summary>Tag</summary>")[1].split("</details>")[0]
    assert re.search(r"<span>games</span><span class=\"n\">2</span>", tags) and "coding" not in tags
    # ...while the verdict facet ignores its own filter, so the alternatives keep their counts.
    verdicts = page.split("<summary>Verdict</summary>")[1].split("</details>")[0]
    for label, count in (("Passing", 2), ("Failing", 1), ("Warnings", 1), ("Not yet validated", 1)):
        assert re.search(rf"<span>{label}</span><span class=\"n\">{count}</span>", verdicts), label
    two = names(client.get("/environments/?verdict=pass&tag=chess").content.decode())
    assert two == ["chess_env"]
    either = sorted(names(client.get("/environments/?verdict=pass&verdict=warn").content.decode()))
    assert either == ["calc_env", "chess_env", "maze_env"]
    assert names(client.get("/environments/?mcp=yes").content.decode()) == ["calc_env"]
    assert names(client.get("/environments/?mode=production").content.decode()) == ["coding_env"]
    assert names(client.get("/environments/?openenv=openenv-core%3E%3D0.2").content.decode()) == ["calc_env"]
    assert "quiet_env" in names(client.get("/environments/?verdict=unvalidated").content.decode())


def test_the_verdict_filter_selects_exactly_what_the_facet_counts(catalog):
    """The filter reads the columns (VERDICT_WHERE), the counts group by the CASE (VERDICT_FACET): the same sets,
    errors counted as failing and a sleeping Space with no verdict as sleeping."""
    from registry.selectors import VERDICT_FACET, VERDICT_WHERE, VERDICTS

    Environment.objects.filter(name="coding_env").update(verdict_outcome="error")
    Environment.objects.filter(name="quiet_env").update(runtime_stage="SLEEPING")
    make_env(catalog, "nap_env")
    services.local_sync()
    Environment.objects.filter(name__in=["nap_env", "chess_env"]).update(runtime_stage="PAUSED")
    faceted = Environment.objects.annotate(facet=VERDICT_FACET)
    seen = set()
    for verdict in VERDICTS:
        chosen = set(Environment.objects.filter(VERDICT_WHERE[verdict]).values_list("name", flat=True))
        assert chosen == set(faceted.filter(facet=verdict).values_list("name", flat=True)), verdict
        seen |= chosen
    assert seen == set(Environment.objects.values_list("name", flat=True))
    assert set(Environment.objects.filter(VERDICT_WHERE["sleeping"]).values_list("name", flat=True)) == {
        "quiet_env", "nap_env"}


def test_every_filter_state_is_one_shareable_url(client, catalog):
    page = client.get("/environments/?tag=games&verdict=pass&sort=likes").content.decode()
    # Links that add a filter keep the others, in a stable order.
    assert 'href="/environments/?verdict=pass&amp;tag=chess&amp;tag=games&amp;sort=likes"' in page
    # The active filters can each be removed, and all cleared.
    assert 'aria-label="Remove filter Tag: games"' in page and ">Clear all</a>" in page


@pytest.mark.parametrize("query", [
    "page=abc", "page=9999", "page=-1", "sort=bogus", "verdict=maybe", "mcp=perhaps", "tag=%00", "owner=a/b",
    "q=" + "x" * 500, "q=%00", "stage=lower", "unknown=1", "verdict=pass&verdict=pass", "openenv=%01",
])
def test_malformed_parameters_never_break_the_page(client, catalog, query):
    response = client.get(f"/environments/?{query}")
    assert response.status_code == 200
    if any(query.startswith(p) for p in ("sort=", "verdict=maybe", "mcp=", "tag=", "owner=", "stage=", "openenv=")):
        assert "Ignored" in response.content.decode()


def test_search_on_sqlite_or_postgresql(client, catalog):
    assert names(client.get("/environments/?q=chess").content.decode())[0] == "chess_env"
    assert "coding_env" in names(client.get("/environments/?q=python").content.decode())  # README text
    assert names(client.get("/environments/?q=calc").content.decode()) == ["calc_env"]


@POSTGRES
def test_postgres_full_text_ranks_names_above_readmes_and_trigrams_forgive_typos(client, catalog):
    ranked = names(client.get("/environments/?q=games").content.decode())
    assert set(ranked) == {"chess_env", "maze_env"}  # tags weigh in
    assert names(client.get("/environments/?q=chss").content.decode())[0] == "chess_env"  # a typo still finds
    assert names(client.get("/environments/?q=maz").content.decode())[0] == "maze_env"
    none = client.get("/environments/?q=zzzzqqq").content.decode()
    assert "No environment matches" in none


@POSTGRES
def test_a_search_with_no_results_suggests_close_names(client, catalog):
    page = client.get("/environments/?q=chess_envv&verdict=fail").content.decode()
    assert "No environment matches" in page and "Close names" in page and "local/chess_env" in page


def test_owner_and_tag_pages_are_the_catalog_prefiltered(client, catalog):
    owner = client.get("/owners/local/").content.decode()
    assert "Environments by local" in owner and len(names(owner)) == 5
    tag = client.get("/tags/games/").content.decode()
    assert "Environments tagged <code>games</code>" in tag and sorted(names(tag)) == ["chess_env", "maze_env"]
    narrowed = client.get("/tags/games/?verdict=pass&q=chess").content.decode()
    assert names(narrowed) == ["chess_env"]
    assert client.get("/tags/a%2Fb/").status_code == 404


def test_browse_paginates_with_the_state_kept(client, catalog, settings):
    root = catalog
    for i in range(25):
        make_env(root, f"extra_{i:02d}")
    services.local_sync()
    first = client.get("/environments/?sort=name&tag=openenv").content.decode()
    assert len(names(first)) == 20 and "Page 1 of 2" in first
    assert 'href="/environments/?tag=openenv&amp;sort=name&amp;page=2"' in first
    second = client.get("/environments/?sort=name&tag=openenv&page=2").content.decode()
    assert len(names(second)) == 10 and not set(names(first)) & set(names(second))


# --- the environment page ---------------------------------------------------------------------------------------

def test_the_environment_page_shows_what_a_user_needs(client, catalog):
    page = client.get("/environments/local/calc_env/").content.decode()
    assert "A calculator with MCP tools." in page and 'class="verdict verdict-warn"' in page
    assert "Verdict <strong>warnings</strong>" in page
    assert "p50" not in page.split("</ul>")[1]  # no passing run yet: no measured latency to show
    # Schemas as tables: field, type, required, description, constraints.
    assert "<td>message <span class=\"req\" title=\"required\">required</span></td><td>string</td>" in page
    assert "max length 100" in page and "one of loud, quiet" in page and "string | null" in page
    # Fields in the order the server declared them, though PostgreSQL's jsonb puts `mode` before `message`.
    action = page.split("<td>message", 1)[1]
    assert "<td>mode" in action and "<td>message" not in action.split("<td>mode", 1)[0] + "x"
    # MCP tools with their input schemas; the sample episode; the report.
    assert "<h3><code>add</code></h3>" in page and "Adds two numbers." in page
    assert "A sample episode" in page and "{&quot;message&quot;: &quot;hello&quot;}" in page and "reward 0.05" in page
    assert "hub.ws_episode" in page and "Full report" in page
    # Time is absolute, in UTC, on hover.
    assert re.search(r'<time datetime="[^"]+\+00:00" title="\d{4}-\d\d-\d\d \d\d:\d\d UTC">', page)


def test_the_pull_block_is_pinned_to_the_revision_shown(client, corpus_stub, settings):
    services.hub_sync()
    env = Environment.objects.select_related("head").get(key="openenv/echo_env")
    page = client.get("/environments/openenv/echo_env/").content.decode()
    sha = env.head.sha
    assert f"pip install git+{settings.HF_ENDPOINT}/spaces/openenv/echo_env@{sha}" in page
    assert f"git checkout {sha}" in page
    assert "docker pull registry.hf.space/openenv-echo-env:latest" in page and "follows the Space, not this commit" in page
    assert "https://openenv-echo-env.hf.space" in page and "wss://openenv-echo-env.hf.space/ws" in page
    # A new commit: the head moves, and the old revision stays reachable with its own pinned pull block.
    new = corpus_stub.put_space("openenv/echo_env", {"openenv.yaml": b"name: echo_env\n", "README.md": b"v2\n"})
    services.hub_sync()
    current = client.get("/environments/openenv/echo_env/").content.decode()
    assert f"@{new}" in current and "older revision" not in current
    older = client.get(f"/environments/openenv/echo_env/?revision={sha[:8]}").content.decode()
    assert "You are looking at an older revision" in older and f"@{sha}" in older and f"@{new}" not in older


def test_the_client_snippet_uses_the_hubs_own_host(client, corpus_stub):
    corpus_stub.put_space("Some.Org/My_Env", {"openenv.yaml": b"name: my_env\n"}, tags=["openenv"])
    services.hub_sync()
    host = Environment.objects.select_related("head").get(key="some.org/my_env").head.host
    assert host.startswith("https://")
    page = client.get("/environments/Some.Org/My_Env/").content.decode()
    assert f'AutoEnv.from_env(&quot;Some.Org/My_Env&quot;, base_url=&quot;{host}&quot;)' in page


def test_revision_lookup_by_prefix_and_its_errors(client, catalog):
    env = Environment.objects.get(name="chess_env")
    sha = env.head.sha
    assert "older revision" not in client.get(f"/environments/local/chess_env/?revision={sha}").content.decode()
    missing = client.get("/environments/local/chess_env/?revision=00000000").content.decode()
    assert "No revision of local/chess_env matches" in missing
    junk = client.get("/environments/local/chess_env/?revision=%00zz").content.decode()
    assert "No revision of local/chess_env matches" in junk
    for i in range(2):  # two revisions that share a prefix
        digest = "abcd" + hashlib.sha256(f"x{i}".encode()).hexdigest()[4:]
        Revision.objects.create(environment=env, sha=digest, content_digest=digest)
    ambiguous = client.get("/environments/local/chess_env/?revision=abcd").content.decode()
    assert "More than one revision starts with" in ambiguous


def test_case_variants_redirect_permanently_with_the_query(client, catalog):
    response = client.get("/environments/LOCAL/Chess_Env/?revision=abc")
    assert response.status_code == 301 and response["Location"] == "/environments/local/chess_env/?revision=abc"


def test_last_known_good_banner_offers_the_passing_revision(client, catalog):
    (catalog / "chess_env" / "README.md").write_text("---\ntags: [openenv]\n---\nNow broken.\n")
    services.local_sync()
    env = Environment.objects.select_related("head").get(name="chess_env")
    good = env.good_run.revision
    finish(env, "fail")
    page = client.get("/environments/local/chess_env/").content.decode()
    assert "fails validation; an earlier one passed" in page and good.sha[:12] in page
    banner = page.split('id="last-known-good"')[1].split('id="pull-h"')[0]
    assert f"content digest {good.sha[:12]}" in banner
    finish(env, "pass")  # fixed: no banner
    assert "an earlier one passed" not in client.get("/environments/local/chess_env/").content.decode()


def test_local_folders_are_shown_to_staff_only(client, catalog, admin_client):
    anonymous = client.get("/environments/local/chess_env/").content.decode()
    assert str(catalog) not in anonymous and "&lt;the package folder&gt;" in anonymous
    staff = admin_client.get("/environments/local/chess_env/").content.decode()
    assert str(catalog / "chess_env") in staff


def test_index_errors_are_shown_in_plain_words(client, settings, tmp_path):
    root = tmp_path / "envs"
    (root / "broken").mkdir(parents=True)
    (root / "broken" / "openenv.yaml").write_text("name: [oops\n")
    settings.HUB_LOCAL_SOURCES = [f"local={root}"]
    services.local_sync()
    page = client.get("/environments/local/broken/").content.decode()
    assert "Index errors" in page and "not valid YAML" in page and "manifest.yaml_invalid" in page


def test_an_environment_with_no_readable_revision_still_has_a_page(client, db):
    Environment.objects.create(source="huggingface", owner="x", name="y", updated_at="2026-01-01T00:00:00Z")
    page = client.get("/environments/x/y/")
    assert page.status_code == 200 and "No revision of this environment could be read yet." in page.content.decode()


# --- errors ------------------------------------------------------------------------------------------------------

def test_404_uses_the_layout_with_search_and_close_names(client, catalog):
    response = client.get("/environments/local/chess_envv/")
    page = response.content.decode()
    assert response.status_code == 404 and "Nothing here" in page and 'role="search"' in page
    assert 'value="chess_envv"' in page
    assert client.get("/no/such/page/").status_code == 404


def test_500_uses_the_layout_without_touching_the_database(db):
    request = RequestFactory().get("/boom")
    with CaptureQueriesContext(connection) as queries:
        response = views.server_error(request)
    assert response.status_code == 500 and "Something went wrong on our side" in response.content.decode()
    assert len(queries) == 0


# --- cost ---------------------------------------------------------------------------------------------------------

def _queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


def test_pages_cost_the_same_whatever_the_number_of_rows_shown(client, catalog):
    """Also the API's lists, which share the cards: a column a card forgot to load would cost a query per row."""
    urls = ["/", "/environments/", "/environments/?q=env&tag=openenv&verdict=pass", "/owners/local/",
            "/tags/openenv/", "/environments/local/chess_env/", "/api/v1/environments/",
            "/api/v1/environments/?q=env&verdict=pass"]
    for url in urls:
        client.get(url)  # README rendered and stored at first view
    before = {url: _queries(client, url) for url in urls}
    for i in range(30):
        make_env(catalog, f"more_{i:02d}", tags=("openenv", f"t{i}"))
    services.local_sync()
    for env in Environment.objects.filter(name__startswith="more_")[:10]:
        finish(env, "pass")
    for url in urls:
        client.get(url)
        assert _queries(client, url) == before[url], url
    assert max(before.values()) <= 16


# --- rough edges --------------------------------------------------------------------------------------------------

def test_runhub_refuses_a_taken_port_and_starts_nothing(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(CommandError, match=rf"Cannot serve on 127.0.0.1:{port} .*another hub already running"):
            call_command("runhub", "--host", "127.0.0.1", "--port", str(port), "--no-sync")


def test_index_space_indexes_a_local_folder(catalog, capsys):
    (catalog / "maze_env" / "README.md").write_text("---\ntags: [openenv]\n---\nA bigger maze.\n")
    call_command("index_space", "local/maze_env")
    assert "updated 1" in capsys.readouterr().out
    assert Environment.objects.get(name="maze_env").head.description == "A bigger maze."
    with pytest.raises(SystemExit):
        call_command("index_space", "local/no_such_env")


def test_cached_facet_counts_follow_every_change(client, catalog, django_capture_on_commit_callbacks):
    def passing() -> int:
        page = client.get("/environments/").content.decode()
        verdicts = page.split("<summary>Verdict</summary>")[1].split("</details>")[0]
        return int(re.search(r"<span>Passing</span><span class=\"n\">(\d+)</span>", verdicts).group(1))

    assert passing() == 2
    assert passing() == 2  # the second view is served from the cache
    with django_capture_on_commit_callbacks(execute=True):
        finish(Environment.objects.get(name="quiet_env"), "pass")
    assert passing() == 3  # a verdict changed: the catalog's version moved on, so did the counts


def test_schema_fields_keep_their_declared_order_whatever_the_database_does():
    from registry.conformance.report import PROPERTY_ORDER, with_property_order
    from registry.presenters import schema_rows

    declared = {"type": "object", "properties": {"zeta_long": {"type": "string"}, "a": {"type": "object",
                "properties": {"yy": {"type": "integer"}, "b": {"type": "number"}}}}}
    recorded = with_property_order(declared)
    assert recorded[PROPERTY_ORDER] == ["zeta_long", "a"] and recorded["properties"]["a"][PROPERTY_ORDER] == ["yy", "b"]
    # As jsonb hands it back: shorter keys first.
    reordered = {"type": "object", PROPERTY_ORDER: ["zeta_long", "a"], "properties": {
        "a": {"type": "object", "properties": {"b": {"type": "number"}, "yy": {"type": "integer"}},
              PROPERTY_ORDER: ["yy", "b"]}, "zeta_long": {"type": "string"}}}
    assert [r.name for r in schema_rows(reordered)] == ["zeta_long", "a", "a.yy", "a.b"]
    # A record that names too little, too much or nonsense never hides a field.
    reordered[PROPERTY_ORDER] = ["a", "ghost", 3]
    assert [r.name for r in schema_rows(reordered)] == ["a", "a.yy", "a.b", "zeta_long"]


def test_a_readme_is_rendered_when_indexed_and_its_ids_never_meet_the_pages(client, settings, tmp_path):
    from registry.models import RevisionReadme

    folder = make_env(tmp_path / "envs", "doc_env")
    (folder / "README.md").write_text("# doc_env\n\n## h\n\nSee [below](#h) and [the code](server/app.py).\n\n"
                                      "<script>window.x=1</script><img src=x onerror=alert(1)>\n")
    settings.HUB_LOCAL_SOURCES = [f"local={tmp_path / 'envs'}"]
    settings.HUB_VALIDATE_NEW_REVISIONS = False
    services.local_sync()
    env = Environment.objects.select_related("head").get(name="doc_env")
    stored = RevisionReadme.objects.get(revision=env.head)  # before anyone asked for the page
    assert 'id="readme-h"' in stored.html and 'href="#readme-h"' in stored.html and "<script" not in stored.html
    page = client.get("/environments/local/doc_env/").content.decode()
    parser = _Ids()
    parser.feed(page)
    assert len(parser.ids) == len(set(parser.ids)), "an id of the README met one of the page's"
    assert "onerror" not in page and "window.x" not in page
    assert "server/app.py" not in page and "the code</a>" in page  # a local folder's file has no public URL


def test_a_readme_the_renderer_fails_on_is_shown_as_text(client, catalog, monkeypatch, caplog):
    from registry import readme
    from registry.models import RevisionReadme

    def broken(markdown, *, repo):
        raise RecursionError("deep")

    monkeypatch.setattr(readme, "render_readme", broken)
    RevisionReadme.objects.all().delete()
    page = client.get("/environments/local/chess_env/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "This README could not be rendered" in text and "Play chess against a fixed engine." in text
    assert "could not be rendered" in caplog.text
