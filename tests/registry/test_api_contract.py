"""The discovery API's contract, on the real database: parameters, errors, authentication order, caching, CORS,
rate limits, golden answers, paging while the catalog changes, and a mirror built from the change feed alone."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from django.db import connection
from django.test import RequestFactory

from registry import selectors, services
from registry.api.errors import server_error
from registry.models import Environment, ValidationRun
from registry.services import validation
from tests.registry.test_pages import POSTGRES, finish, make_env

pytestmark = pytest.mark.django_db

GOLDEN = Path(__file__).parent / "golden"
API = "/api/v1"


@pytest.fixture
def catalog(settings, tmp_path):
    root = tmp_path / "envs"
    make_env(root, "alpha", description="The first.", tags=("openenv", "games"))
    make_env(root, "beta", description="The second.", tags=("openenv",))
    settings.HUB_LOCAL_SOURCES = [f"local={root}"]
    settings.HUB_VALIDATE_NEW_REVISIONS = False
    services.local_sync()
    finish(Environment.objects.get(name="alpha"), "pass")
    return root


def error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code and body["error"]["message"]
    return body["error"]


# --- parameters -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("query, param, accepted", [
    ("page_size=abc", "page_size", "whole number from 1 to 200"),
    ("page_size=0", "page_size", "whole number"),
    ("cursor=!!!", "cursor", "not a cursor this API gave out"),
    ("status=bogus", "status", "active, withdrawn, all"),
    ("source=git", "source", "huggingface, local"),
    ("sort=random", "sort", "relevance, updated, likes"),
    ("verdict=maybe", "verdict", "pass, warn, fail, sleeping, unvalidated"),
    ("mcp=perhaps", "mcp", "yes, no"),
    ("updated_since=yesterday", "updated_since", "RFC 3339"),
    ("updated_since=2026-01-01T00:00:00", "updated_since", "time zone"),
    ("include_withdrawn=yes", "include_withdrawn", "true or false"),
    ("owner=a%2Fb", "owner", "owner id"),
])
def test_malformed_parameters_are_400s_that_name_them(client, catalog, query, param, accepted):
    detail = error(client.get(f"{API}/environments/?{query}"), 400, "invalid")["detail"]
    assert param in detail and accepted in json.dumps(detail)


@pytest.mark.parametrize("url", [f"{API}/environments/local/alpha/revisions/", f"{API}/tags/", f"{API}/owners/",
                                 f"{API}/environments/local/alpha/validations/"])
def test_page_numbers_are_checked_and_page_sizes_clamped(client, catalog, url):
    assert "page" in error(client.get(f"{url}?page=abc"), 400, "invalid")["detail"]
    assert "page" in error(client.get(f"{url}?page=99"), 400, "invalid")["detail"]
    assert "page_size" in error(client.get(f"{url}?page_size=x"), 400, "invalid")["detail"]
    clamped = client.get(f"{url}?page_size=5000")
    assert clamped.status_code == 200 and clamped["X-Page-Size-Clamped"] == "5000 -> 200"


def test_unknown_parameters_are_ignored(client, catalog):
    assert client.get(f"{API}/environments/?utm_source=x&frobnicate=1").status_code == 200


# --- authentication and methods ---------------------------------------------------------------------------------

def test_a_wrong_scheme_says_which_one_is_accepted(client, catalog):
    detail = error(client.post(f"{API}/environments/local/alpha/validations/", HTTP_AUTHORIZATION="Token abc"),
                   401, "authentication_failed")
    assert "Bearer <token>" in detail["message"] and "Hugging Face token" in detail["message"] and "'Token'" in detail["message"]


def test_order_of_checks_never_asks_the_hub_needlessly(client, catalog, hub_stub):
    hub_stub.add_token("hf_owner", "someone")
    hub_stub.reset_requests()
    unknown = client.post(f"{API}/environments/nobody/nothing/validations/", HTTP_AUTHORIZATION="Bearer hf_owner")
    error(unknown, 404, "not_found")
    local = client.post(f"{API}/environments/local/alpha/validations/", HTTP_AUTHORIZATION="Bearer hf_owner")
    assert "does not come from the Hugging Face Hub" in error(local, 403, "permission_denied")["message"]
    assert hub_stub.count("whoami") == 0  # neither answer needed the Hub
    hub_stub.stop()  # and a Hub that is down changes neither
    local = client.post(f"{API}/environments/local/alpha/validations/", HTTP_AUTHORIZATION="Bearer hf_other")
    error(local, 403, "permission_denied")


@pytest.mark.parametrize("method", ["put", "patch", "delete"])
def test_unsupported_methods_are_405s_in_the_envelope(client, catalog, method):
    for url in (f"{API}/environments/", f"{API}/environments/local/alpha/", f"{API}/tags/"):
        error(getattr(client, method)(url), 405, "method_not_allowed")


def test_every_4xx_and_5xx_has_the_envelope(client, catalog):
    error(client.get(f"{API}/environments/local/nope/"), 404, "not_found")
    error(client.get(f"{API}/no/such/route/"), 404, "not_found")
    error(client.get(f"{API}/environments/local/alpha/revisions/ffff/"), 404, "not_found")
    error(client.get(f"{API}/environments/local/alpha/validations/999999/"), 404, "not_found")
    anonymous = client.post(f"{API}/environments/local/alpha/validations/", "{", content_type="application/json")
    assert error(anonymous, 401, "not_authenticated") and anonymous["WWW-Authenticate"].startswith("Bearer")
    crash = server_error(RequestFactory().get(f"{API}/environments/"))
    assert crash.status_code == 500 and json.loads(crash.content)["error"]["code"] == "server_error"
    page = server_error(RequestFactory().get("/environments/"))
    assert page.status_code == 500 and b"Something went wrong" in page.content


# --- caching, CORS, rate limits ---------------------------------------------------------------------------------

def test_conditional_requests_and_cache_lifetimes(client, catalog):
    detail = client.get(f"{API}/environments/local/alpha/")
    assert detail["ETag"] and detail["Last-Modified"] and detail["Cache-Control"] == "public, max-age=30"
    again = client.get(f"{API}/environments/local/alpha/", HTTP_IF_NONE_MATCH=detail["ETag"])
    assert again.status_code == 304 and again.content == b""
    assert client.get(f"{API}/environments/", HTTP_IF_NONE_MATCH=detail["ETag"]).status_code == 200
    run = ValidationRun.objects.get(environment__name="alpha")
    finished = client.get(f"{API}/environments/local/alpha/validations/{run.pk}/")
    assert finished["Cache-Control"] == "public, max-age=86400, immutable"
    sha = Environment.objects.get(name="alpha").head.sha
    assert client.get(f"{API}/environments/local/alpha/revisions/{sha}/")["Cache-Control"] == "public, max-age=300"
    assert client.get(f"{API}/environments/")["Cache-Control"] == "public, max-age=30"


def test_cors_for_reads_and_nothing_for_writes(client, catalog):
    read = client.get(f"{API}/environments/", HTTP_ORIGIN="https://elsewhere.example")
    assert read["Access-Control-Allow-Origin"] == "*"
    write = client.post(f"{API}/environments/local/alpha/validations/", HTTP_ORIGIN="https://elsewhere.example")
    assert "Access-Control-Allow-Origin" not in write
    preflight_get = client.options(f"{API}/environments/", HTTP_ORIGIN="https://x.example",
                                   HTTP_ACCESS_CONTROL_REQUEST_METHOD="GET")
    assert preflight_get["Access-Control-Allow-Methods"] == "GET, HEAD"
    preflight_post = client.options(f"{API}/environments/local/alpha/validations/", HTTP_ORIGIN="https://x.example",
                                    HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST")
    assert "Access-Control-Allow-Origin" not in preflight_post
    assert "Access-Control-Allow-Origin" not in client.get("/environments/")  # pages are not shared


def test_rate_limits_are_told_on_every_answer_and_enforced(client, catalog, settings):
    settings.HUB_API_RATE_ANONYMOUS = 3
    if time.time() % 60 > 55:  # counted per minute: begin in a fresh one, not a few requests before it ends
        time.sleep(60 - time.time() % 60)
    seen = []
    for _ in range(3):
        response = client.get(f"{API}/tags/")
        assert response.status_code == 200 and response["RateLimit-Limit"] == "3"
        seen.append(int(response["RateLimit-Remaining"]))
    assert seen == [2, 1, 0]
    over = client.get(f"{API}/environments/")
    throttled = error(over, 429, "throttled")
    assert int(over["Retry-After"]) > 0 and over["RateLimit-Remaining"] == "0" and "available in" in throttled["message"]
    assert 0 < int(over["Retry-After"]) == int(over["RateLimit-Reset"]) <= 60
    other = client.get(f"{API}/tags/", REMOTE_ADDR="10.0.0.9")  # another client is not held back
    assert other.status_code == 200


# --- golden answers ---------------------------------------------------------------------------------------------

_VOLATILE = re.compile(r'"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d))"')


def _stable(body) -> str:
    """The answer with what changes from run to run (times, run ids, tmp paths) masked."""
    text = json.dumps(body, indent=1, sort_keys=True)
    text = _VOLATILE.sub('"<time>"', text)
    text = re.sub(r'"(run_id|id)": \d+', r'"\1": "<id>"', text)
    text = re.sub(r"/validations/\d+/", "/validations/<id>/", text)
    return text + "\n"


@pytest.mark.parametrize("name, url", [
    ("environments", f"{API}/environments/?page_size=2"),
    ("environment", f"{API}/environments/local/alpha/"),
    ("revisions", f"{API}/environments/local/alpha/revisions/"),
    ("validations", f"{API}/environments/local/alpha/validations/"),
    ("validation-latest", f"{API}/environments/local/alpha/validations/latest/"),
    ("tags", f"{API}/tags/"),
    ("owners", f"{API}/owners/"),
    ("errors-404", f"{API}/environments/local/nope/"),
    ("errors-400", f"{API}/environments/?sort=x&page_size=0"),
])
def test_golden_answers(client, catalog, name, url):
    """Each endpoint's answer, field by field, is the documented one (UPDATE_GOLDEN=1 rewrites them)."""
    actual = _stable(client.get(url).json())
    path = GOLDEN / f"{name}.json"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(actual)
    assert actual == path.read_text()


# --- paging while the catalog changes, and a mirror from the change feed --------------------------------------

def _page_through(client, url: str, between=lambda n: None) -> list[str]:
    seen, n = [], 0
    while url:
        body = client.get(url).json()
        seen += [item["id"] for item in body["results"]]
        url = body["next"]
        between(n)
        n += 1
    return seen


def test_paging_while_the_catalog_changes_loses_and_repeats_nothing(client, catalog):
    for i in range(20):
        make_env(catalog, f"env_{i:02d}")
    services.local_sync()
    before = set(Environment.objects.values_list("key", flat=True))

    def change(n: int) -> None:  # between every two pages: new environments, new revisions, new verdicts, likes
        make_env(catalog, f"new_{n}")
        make_env(catalog, f"aaa_{n}")  # sorts before anything already seen
        (catalog / f"env_{(n * 7) % 20:02d}" / "README.md").write_text(f"---\ntags: [openenv]\n---\nChange {n}.\n")
        services.local_sync()
        finish(Environment.objects.get(name=f"env_{(n * 3) % 20:02d}"), "fail")
        Environment.objects.filter(name=f"env_{n % 20:02d}").update(likes=n * 10)

    seen = _page_through(client, f"{API}/environments/?page_size=4", change)
    assert len(seen) == len(set(seen))  # nothing twice
    assert before <= {s.lower() for s in seen}  # nothing that existed when paging began was lost


@POSTGRES
def test_relevance_is_the_best_field_that_answers_then_likes_and_pages_through_every_tier(client, catalog):
    """Names above description and tags above the README, the most liked first within each; paged two at a
    time, while new matches arrive in every tier, nothing is lost or repeated and each page keeps that order."""
    def env(name: str, *, description: str = "A plain environment.", tags=("openenv",), readme: str = "",
            likes: int = 0) -> None:
        folder = make_env(catalog, name, description=description, tags=tags)
        if readme:
            with (folder / "README.md").open("a") as fh:
                fh.write(f"\n## More\n\n{readme}\n")
        pending.append((name, likes))

    pending: list[tuple[str, int]] = []
    env("chess_small", likes=1)
    env("chess_big", likes=5)
    env("board_one", description="A chess board to play on.", likes=50)
    env("board_two", tags=("openenv", "chess"), likes=2)
    env("reader_one", readme="It also plays chess now and then.", likes=500)
    env("reader_two", readme="Chess, sometimes.", likes=3)
    env("reader_three", readme="Chess openings.", likes=3)
    env("unrelated", readme="Checkers only.", likes=900)

    def sync() -> None:
        services.local_sync()
        for name, likes in pending:
            Environment.objects.filter(name=name).update(likes=likes)
        pending.clear()

    sync()
    expected = ["chess_big", "chess_small", "board_one", "board_two", "reader_one", "reader_three", "reader_two"]
    assert [i.split("/")[1] for i in _page_through(client, f"{API}/environments/?q=chess&page_size=2")] == expected
    page = client.get("/environments/?q=chess").content.decode()
    assert re.findall(r'<span class="owner">local/</span>(\w+)</a>', page) == expected  # the page: the same order
    names = dict(Environment.objects.values_list("pk", "name"))
    matches = selectors.catalog_matches(selectors.CatalogQuery(q="chess"))
    for start, stop in [(0, 1), (1, 4), (3, 6), (5, 9), (7, 9)]:  # slices within a tier, across tiers, past the end
        assert [names[pk] for pk in matches[start:stop]] == expected[start:stop]

    arrivals = iter([("chess_new", {}), ("board_new", {"description": "Chess for two."}),
                     ("reader_new", {"readme": "Chess again."})] * 2)

    def arrive(n: int) -> None:  # between pages: a new match, in turn in each tier, and one that matches nothing
        name, kwargs = next(arrivals, (None, None))
        if name:
            env(f"{name}_{n}", **kwargs)
            env(f"other_{n}")
            sync()

    seen = _page_through(client, f"{API}/environments/?q=chess&page_size=2", arrive)
    assert len(seen) == len(set(seen))
    assert set(expected) <= {i.split("/")[1] for i in seen}
    assert not any("other_" in i or "unrelated" in i for i in seen)
    # A typo matches no word: the names most like it answer instead, in the same order, paged the same way.
    typo = [i.split("/")[1] for i in _page_through(client, f"{API}/environments/?q=chesss_big&page_size=1")]
    assert typo[0] == "chess_big" and len(typo) == len(set(typo)) and "unrelated" not in typo
    with connection.cursor() as cursor:  # the tiers' small vector is exactly the names-and-summary part
        cursor.execute("SELECT count(*), count(*) FILTER (WHERE summary = ts_filter(vector, '{a,b}')) "
                       "FROM registry_environmentsearch")
        total, same = cursor.fetchone()
    assert total == Environment.objects.count() and same == total


def _mirror_sync(client, mirror: dict, since: str | None) -> str | None:
    url = f"{API}/environments/?include_withdrawn=true&page_size=3" + (f"&updated_since={since}" if since else "")
    url = url.replace("+00:00", "Z")
    while url:
        body = client.get(url).json()
        for item in body["results"]:
            mirror[item["id"]] = (item["head_sha"], (item["verdict"] or {}).get("outcome"), item["status"])
            since = max(since or item["changed_at"], item["changed_at"])
        url = body["next"]
    return since


def _index() -> dict:
    return {env.repo_id: (env.head.sha if env.head else None, env.verdict_run.outcome if env.verdict_run else None,
                          env.status)
            for env in Environment.objects.select_related("head", "verdict_run")}


def test_a_mirror_built_from_the_change_feed_reproduces_the_index(client, catalog, settings):
    mirror: dict = {}
    since = _mirror_sync(client, mirror, None)
    assert mirror == _index()
    steps = [
        lambda: make_env(catalog, "gamma"),  # a new environment
        lambda: (catalog / "alpha" / "README.md").write_text("---\ntags: [openenv]\n---\nAlpha, v2.\n"),
        lambda: finish(Environment.objects.get(name="beta"), "warn"),  # a verdict
        lambda: os.rename(catalog / "beta", catalog.parent / "beta-away"),  # a withdrawal
        lambda: finish(Environment.objects.get(name="alpha"), "fail"),
        lambda: os.rename(catalog.parent / "beta-away", catalog / "beta"),  # a comeback
    ]
    for step in steps:
        step()
        services.local_sync()
        since = _mirror_sync(client, mirror, since)
        assert mirror == _index()
    assert mirror["local/beta"][2] == "active" and mirror["local/alpha"][1] == "fail"
