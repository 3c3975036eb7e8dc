"""Every page and endpoint about an environment costs the same whatever its history: a fixed number of queries,
and no query reads a revision's README or file list (up to 1 MiB and 2,000 entries each)."""

from __future__ import annotations

import hashlib

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from registry.models import Revision, ValidationRun
from registry.services import validation

pytestmark = pytest.mark.django_db

BIG_README = "# A README\n\n" + "x" * (1024 * 1024 - 20)


def _add_revisions(env, n: int) -> None:
    for i in range(n):
        sha = hashlib.sha256(f"{env.key}-{i}".encode()).hexdigest()
        Revision.objects.create(environment=env, sha=sha, content_digest=sha, readme_raw=BIG_README,
                                readme_body=BIG_README, files=[{"path": f"f{j}", "size": 1} for j in range(2000)],
                                manifest_name=f"rev{i}")


def _finished_run(env, revision) -> ValidationRun:
    run, _ = validation.validation_run_request(revision=revision, trigger="request")
    validation.validation_run_start(run_id=run.pk)
    validation.validation_run_finish(run_id=run.pk, outcome="pass", report={"verdict": "pass", "results": []},
                                     observed={"schemas": None, "tools": None, "episode": []})
    return run


def _urls(env, run) -> dict[str, str]:
    kw = {"owner": env.owner, "name": env.name}
    return {
        "home": reverse("registry:home"),
        "environment page": reverse("registry:environment", kwargs=kw),
        "report page": reverse("registry:validation-report", kwargs={**kw, "run_id": run.pk}),
        "api list": reverse("api:environment-list"),
        "api detail": reverse("api:environment-detail", kwargs=kw),
        "api revisions": reverse("api:revision-list", kwargs=kw),
        "api validations": reverse("api:validation-list", kwargs=kw),
        "api validation": reverse("api:validation-detail", kwargs={**kw, "run_id": run.pk}),
        "api latest": reverse("api:validation-latest", kwargs=kw),
    }


def _cost(client, url: str) -> tuple[int, list[str]]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return len(queries), [q["sql"] for q in queries.captured_queries]


def test_requests_do_not_grow_with_the_number_of_revisions(client, tiny_envs):
    env = tiny_envs
    run = _finished_run(env, env.head)
    for url in _urls(env, run).values():
        client.get(url)  # the first view of a revision renders and stores its README, once
    few = {label: _cost(client, url)[0] for label, url in _urls(env, run).items()}
    _add_revisions(env, 60)
    for label, url in _urls(env, run).items():
        count, sql = _cost(client, url)
        assert count == few[label], f"{label}: {few[label]} queries with 1 revision, {count} with 61"
        assert count <= 10, f"{label}: {count} queries"  # the environment page's leaderboard is one
        leaked = [q for q in sql if "readme_raw" in q or '"files"' in q]
        assert leaked == [], f"{label} read README or file lists: {leaked[0][:300]}"


def test_the_pages_and_the_api_page_through_revisions(client, tiny_envs):
    env = tiny_envs
    _add_revisions(env, 45)
    detail = client.get(reverse("api:environment-detail", kwargs={"owner": "local", "name": "alpha"})).json()
    assert detail["revision_count"] == 46 and len(detail["revisions"]) == 20
    listed, url = [], detail["revisions_url"]
    while url:
        page = client.get(url).json()
        listed += [r["sha"] for r in page["results"]]
        url = page["next"]
    assert len(listed) == len(set(listed)) == 46 and listed[:20] == [r["sha"] for r in detail["revisions"]]
    page = client.get(reverse("registry:environment", kwargs={"owner": "local", "name": "alpha"}))
    assert page.content.decode().count('<tr><td><a href="?revision=') == 20 and b"revisions_page=2" in page.content
    last = client.get(reverse("registry:environment", kwargs={"owner": "local", "name": "alpha"}) + "?revisions_page=3")
    assert last.content.decode().count('<tr><td><a href="?revision=') == 6
