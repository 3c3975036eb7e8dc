"""Indexing through the real huggingface_hub client against the Hub stand-in, on the real database."""

from __future__ import annotations

import email.utils
import json
import math
from datetime import datetime, timedelta, timezone

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from registry import manifest as mf
from registry import services
from registry.hub import HubClient
from registry.models import Environment, IndexProblem, Revision, SyncRun
from tests.conftest import CORPUS, CORPUS_NAMES
from tests.support.hostile_spaces import HOSTILE

pytestmark = [pytest.mark.django_db, pytest.mark.integration]


def env(repo_id: str) -> Environment:
    return Environment.objects.select_related("head").get(key=repo_id.lower())


def open_codes(repo_id: str) -> list[str]:
    return sorted(env(repo_id).problems.filter(resolved_at__isnull=True).values_list("code", flat=True))


def pages(n: int, size: int) -> int:
    return max(1, math.ceil(n / size))


def test_first_sync_indexes_every_corpus_environment(corpus_stub):
    summary = services.hub_sync()
    run = summary.run
    assert (run.found, run.new, run.updated, run.unchanged, run.withdrawn, run.errors) == (34, 34, 0, 0, 0, 0)
    assert run.listing_complete and run.state == SyncRun.State.FINISHED

    for name in CORPUS_NAMES:
        e = env(f"openenv/{name}")
        want = mf.parse_manifest((CORPUS / name / "openenv.yaml").read_bytes())[1]
        assert e.status == Environment.Status.ACTIVE
        assert e.source == Environment.Source.HUGGINGFACE
        assert e.head.manifest_name == want["name"]
        assert e.head.manifest == want
        assert e.head.sha == corpus_stub.head(f"openenv/{name}")
        assert e.head.description, name
        assert e.head.space_id == f"openenv/{name}"
        assert e.head.subdomain == mf.subdomain_for(f"openenv/{name}")
        assert e.head.host == f"https://{e.head.subdomain}.hf.space"
        assert e.head.sdk == "docker"
        assert e.head.runtime_stage == "RUNNING"
        assert {f["path"] for f in e.head.files} == {
            p.relative_to(CORPUS / name).as_posix() for p in (CORPUS / name).rglob("*") if p.is_file()}
        assert e.problems.count() == 0
        # Tags: what the card declares (or the `openenv` tag `openenv push` writes), as the Hub lists them.
        readme = (CORPUS / name / "README.md").read_bytes()
        declared = mf.card_tags(mf.parse_readme(readme)[1]) if readme.startswith(b"---") else ["openenv"]
        assert set(declared) <= set(e.head.tags), (name, declared, e.head.tags)

    # Names disagree by design; each is kept as the tool spells it.
    grid = env("openenv/grid_world_env").head
    assert (grid.manifest_name, grid.package_name) == ("grid_world", "grid_world_env")
    # Description: the manifest's, the card's short_description, else the README's first paragraph.
    assert env("openenv/browsergym_env").head.description == "BrowserGym environment for web automation tasks using Playwright"
    assert env("openenv/jupyter_env").head.description == "Stateful Jupyter notebook environment backed by E2B"
    assert env("openenv/echo_env").head.description.startswith("A simple test environment that echoes back messages.")
    assert "browsergym" in env("openenv/browsergym_env").head.tags
    assert env("openenv/echo_env").head.openenv_requirement == "openenv[core]>=0.2.2"
    # grid_world_env's README has front-matter without tags, so `openenv push` left it untagged: search finds it.
    assert "openenv" not in env("openenv/grid_world_env").head.tags

    # Every listing was followed through its Link pages to the end.
    tagged = sum(1 for name in CORPUS_NAMES if "openenv" in env(f"openenv/{name}").head.tags)
    assert tagged == 33
    assert corpus_stub.count("list") == pages(tagged, 10) + pages(0, 10) + pages(34, 10)
    # Reads: the listing named the files, so only the three metadata files are fetched, pinned to the sha.
    assert corpus_stub.count("info") == 0
    assert corpus_stub.count("resolve") == 34 * 3
    resolves = [r for r in corpus_stub.requests if r.kind == "resolve"]
    assert resolves and all(f"/resolve/{corpus_stub.head(r.repo_id)}/" in r.path for r in resolves)


def test_second_sync_with_nothing_changed_downloads_nothing(corpus_stub):
    services.hub_sync()
    corpus_stub.reset_requests()
    run = services.hub_sync().run
    assert (run.found, run.new, run.updated, run.unchanged, run.errors) == (34, 0, 0, 34, 0)
    assert corpus_stub.count("resolve") == 0
    assert corpus_stub.count("info") == 0
    assert corpus_stub.count("tree") == 0
    assert corpus_stub.count() == corpus_stub.count("list")
    assert Revision.objects.count() == 34


def test_a_new_commit_is_read_alone_and_old_revisions_stay(corpus_stub):
    services.hub_sync()
    old = env("openenv/echo_env").head
    old_fields = Revision.objects.filter(pk=old.pk).values().get()
    corpus_stub.set_likes("openenv/chess_env", 7)
    new_sha = corpus_stub.put_space("openenv/echo_env", {
        **{name: (CORPUS / "echo_env" / name).read_bytes() for name in ("README.md", "pyproject.toml")},
        "openenv.yaml": b"spec_version: 1\nname: echo_env\ndescription: Echo, now described\n",
    })
    corpus_stub.reset_requests()

    run = services.hub_sync().run
    assert (run.new, run.updated, run.unchanged) == (0, 1, 33)
    assert {r.repo_id for r in corpus_stub.requests if r.kind in ("resolve", "info")} == {"openenv/echo_env"}
    e = env("openenv/echo_env")
    assert e.head.sha == new_sha and e.head.description == "Echo, now described"
    assert list(e.revisions.values_list("sha", flat=True).order_by("id")) == [old.sha, new_sha]
    assert Revision.objects.filter(pk=old.pk).values().get() == old_fields  # immutable
    assert env("openenv/chess_env").likes == 7  # live facts follow the listing without a new revision


def test_a_space_reset_to_an_indexed_sha_moves_head_back_without_reading(corpus_stub):
    v1 = corpus_stub.put_space("rev/x", {"openenv.yaml": b"name: v1\n"}, tags=["openenv"])
    services.hub_sync()
    v2 = corpus_stub.put_space("rev/x", {"openenv.yaml": b"name: v2\n"}, tags=["openenv"])
    services.hub_sync()
    assert env("rev/x").head.sha == v2
    corpus_stub.reset_space("rev/x", v1)
    corpus_stub.reset_requests()
    run = services.hub_sync().run
    assert (run.updated, run.unchanged) == (1, 34)
    assert env("rev/x").head.sha == v1 and env("rev/x").head.manifest_name == "v1"
    assert corpus_stub.count("resolve") == 0 and Revision.objects.filter(environment__key="rev/x").count() == 2
    assert services.hub_sync().run.unchanged == 35  # settled, not "updated" forever


def test_a_slow_writer_with_older_news_does_not_move_head(corpus_stub):
    corpus_stub.put_space("race/x", {"openenv.yaml": b"name: first\n"}, tags=["openenv"])
    client = HubClient()
    old_news = client.space("race/x")  # a worker reads the Space, then stalls
    second = corpus_stub.put_space("race/x", {"openenv.yaml": b"name: second\n"}, tags=["openenv"])
    services.space_index_by_id(repo_id="race/x")  # a webhook indexes the newer commit first
    assert env("race/x").head.sha == second
    assert services.space_index(client=client, space=old_news) == services.UPDATED
    e = env("race/x")
    assert e.head.sha == second  # the late writer's revision is stored, not made head
    assert e.revisions.filter(sha=old_news.sha).exists()


@pytest.mark.parametrize("order", ["older_news_written_first", "newer_news_written_first"])
def test_interleaved_writers_end_on_the_newer_commit(corpus_stub, order):
    """Freshness compares when the Hub spoke on both sides, never when a writer got round to writing."""
    corpus_stub.put_space("race/y", {"openenv.yaml": b"name: first\n"}, tags=["openenv"])
    client = HubClient()
    older = client.space("race/y")
    newer_sha = corpus_stub.put_space("race/y", {"openenv.yaml": b"name: second\n"}, tags=["openenv"])
    newer = client.space("race/y")
    assert older.observed_at < newer.observed_at and newer.sha == newer_sha
    writes = [older, newer] if order == "older_news_written_first" else [newer, older]
    for news in writes:
        services.space_index(client=client, space=news)
    e = env("race/y")
    assert e.head.sha == newer_sha and e.head.manifest_name == "second"
    assert e.head_observed_at == newer.observed_at
    assert set(e.revisions.values_list("sha", flat=True)) == {older.sha, newer_sha}


def test_a_listing_that_confirms_head_makes_older_news_stale(corpus_stub):
    corpus_stub.put_space("race/z", {"openenv.yaml": b"name: first\n"}, tags=["openenv"])
    client = HubClient()
    old_news = client.space("race/z")
    second = corpus_stub.put_space("race/z", {"openenv.yaml": b"name: second\n"}, tags=["openenv"])
    services.hub_sync()
    confirmed = env("race/z").head_observed_at
    services.hub_sync()  # nothing new: the listing only confirms head, later
    assert env("race/z").head_observed_at > confirmed
    services.space_index(client=client, space=old_news)
    assert env("race/z").head.sha == second


def test_the_database_refuses_to_change_a_revision(corpus_stub):
    from django.db import IntegrityError, transaction

    services.hub_sync()
    head = env("openenv/echo_env").head
    with pytest.raises(IntegrityError, match="immutable"), transaction.atomic():
        Revision.objects.filter(pk=head.pk).update(description="rewritten")
    assert Revision.objects.get(pk=head.pk).description == head.description


def test_running_the_same_index_twice_changes_nothing(corpus_stub):
    client = HubClient()
    listing = client.list_environment_spaces()
    space = listing.spaces["openenv/echo_env"]
    assert services.space_index(client=client, space=space) == services.NEW
    corpus_stub.reset_requests()
    assert services.space_index(client=client, space=space) == services.UNCHANGED
    assert corpus_stub.count() == 0
    assert Revision.objects.count() == 1


def test_withdrawal_is_confirmed_and_keeps_history(corpus_stub):
    services.hub_sync()
    corpus_stub.delete_space("openenv/atari_env")
    corpus_stub.set_private("openenv/carla_env")
    # No tag and no manifest any more: not an environment.
    corpus_stub.put_space("openenv/kernrl", {"README.md": b"# kernrl\n\nMoved elsewhere.\n"}, tags=[])
    corpus_stub.reset_requests()

    run = services.hub_sync().run
    assert run.withdrawn == 3 and run.errors == 0
    for repo_id, reason in [
        ("openenv/atari_env", "Gone from the Hub"),
        ("openenv/carla_env", "Gone from the Hub"),
        ("openenv/kernrl", "No longer an environment"),
    ]:
        e = env(repo_id)
        assert e.status == Environment.Status.WITHDRAWN, repo_id
        assert e.status_reason.startswith(reason)
        assert e.status_changed_at is not None
        assert e.head is not None and e.revisions.count() >= 1  # history kept
    # Each disappearance was confirmed with space_info before withdrawing.
    assert corpus_stub.count("info", repo_id="openenv/atari_env") == 1
    assert corpus_stub.count("info", repo_id="openenv/carla_env") == 1

    # A withdrawn Space that comes back is active again, without a second download of a known sha.
    corpus_stub.set_private("openenv/carla_env", False)
    run = services.hub_sync().run
    assert run.updated == 1
    assert env("openenv/carla_env").status == Environment.Status.ACTIVE
    assert env("openenv/carla_env").status_reason == ""


def test_incomplete_listing_withdraws_nothing(corpus_stub, settings):
    services.hub_sync()
    corpus_stub.delete_space("openenv/atari_env")
    # The search listing keeps failing from its second page on.
    corpus_stub.inject(lambda r: r.kind == "list" and r.query.get("search") == ["openenv"] and "cursor" in r.query,
                       status=500, times=None)
    summary = services.hub_sync()
    assert not summary.run.listing_complete
    assert summary.run.withdrawn == 0
    assert summary.run.errors == 1
    assert "search 'openenv'" in summary.run.messages[0] and "HTTP 500" in summary.run.messages[0]
    assert env("openenv/atari_env").status == Environment.Status.ACTIVE
    assert "nothing was withdrawn" in str(summary)


def test_429_is_honoured_and_5xx_retried(corpus_stub):
    slept: list[float] = []
    client = HubClient(sleep=slept.append)
    corpus_stub.inject("list", status=429, retry_after=2, times=1)
    corpus_stub.inject("resolve", status=503, times=2, repo_id="openenv/echo_env")
    run = services.hub_sync(client=client).run
    assert (run.new, run.errors) == (34, 0)
    assert slept[0] == 2.0  # Retry-After, to the second
    assert len(slept) == 3  # and two backoffs for the 503s
    assert corpus_stub.count("list", injected=True) == 1
    assert corpus_stub.count("resolve", repo_id="openenv/echo_env", injected=True) == 2


def test_retry_after_is_capped(corpus_stub, settings):
    settings.HUB_RETRY_AFTER_MAX_S = 5
    slept: list[float] = []
    corpus_stub.inject("list", status=429, retry_after=86400, times=1)
    services.hub_sync(client=HubClient(sleep=slept.append))
    assert slept == [5.0]


def test_retry_after_as_an_http_date_or_garbage(corpus_stub, settings):
    settings.HUB_RETRY_AFTER_MAX_S = 60
    slept: list[float] = []
    in_20s = email.utils.format_datetime(datetime.now(timezone.utc) + timedelta(seconds=20), usegmt=True)
    corpus_stub.inject("list", status=429, retry_after=in_20s, times=1)
    corpus_stub.inject("list", status=429, retry_after="soon, maybe", times=1)
    services.hub_sync(client=HubClient(sleep=slept.append))
    assert 17 <= slept[0] <= 21  # the date, as seconds from now
    assert slept[1] == settings.HUB_RETRY_BASE_S * 2  # unreadable: our own backoff (second attempt)


def test_a_hub_that_keeps_failing_one_space_does_not_stop_the_others(corpus_stub):
    corpus_stub.inject("resolve", status=500, times=None, repo_id="openenv/chess_env")
    run = services.hub_sync().run
    assert (run.found, run.new, run.errors) == (34, 33, 1)
    chess = env("openenv/chess_env")
    assert chess.head is None
    problem = chess.problems.get()
    assert problem.code == "hub.unavailable" and problem.transient
    assert "HTTP 500" in problem.message and "retried on the next sync" in problem.message

    # Still failing: the same problem is bumped, not duplicated.
    services.hub_sync()
    assert chess.problems.get().occurrences == 2

    # The Hub recovers: the next sync reads it and the problem is resolved.
    corpus_stub.clear_injections()
    run = services.hub_sync().run
    assert (run.new, run.errors) == (1, 0)
    assert env("openenv/chess_env").head is not None
    assert open_codes("openenv/chess_env") == []


def test_hostile_spaces_are_indexed_with_clear_errors_and_stop_nothing(corpus_stub):
    for repo_id, (files, _) in HOSTILE.items():
        corpus_stub.put_space(repo_id, files, tags=["openenv"])
    corpus_stub.reset_requests()
    run = services.hub_sync().run
    assert run.new == 34 + len(HOSTILE) and run.errors == 0
    for repo_id, (_, code) in HOSTILE.items():
        e = env(repo_id)
        assert e.head is not None, repo_id
        problems = list(e.problems.filter(resolved_at__isnull=True))
        assert code in [p.code for p in problems], (repo_id, [p.code for p in problems])
        assert all(p.revision_id == e.head_id and p.sha == e.head.sha and len(p.message) > 20 for p in problems)
    # Files over the cap are cut off, not stored.
    assert env("evil/huge_manifest").head.manifest_raw == ""
    assert env("evil/huge_readme").head.readme_raw == ""
    assert "larger than 1,048,576 bytes" in env("evil/huge_readme").problems.get(code="readme.too_large").message
    assert open_codes("evil/huge_manifest") == ["manifest.too_large"]  # not also "missing"
    assert env("evil/huge_manifest").head.manifest is None
    assert env("evil/alias_bomb").head.manifest is None
    # The README is kept verbatim for people to read, whatever it says.
    assert env("evil/tagged_no_manifest").head.readme_body.strip() == "I am tagged."
    assert "2024-02-30" in env("evil/no_such_date").problems.get(code="manifest.yaml_invalid").message
    # A second sync reads nothing again: every hostile Space is indexed at its sha.
    corpus_stub.reset_requests()
    assert services.hub_sync().run.unchanged == 34 + len(HOSTILE)
    assert corpus_stub.count("resolve") == 0


def test_nul_and_oversized_strings_are_stored_safely(corpus_stub):
    """PostgreSQL text holds no NUL and varchar enforces lengths: both arrive from YAML escapes and Hub JSON."""
    corpus_stub.put_space("evil/nul", {
        "openenv.yaml": b'name: "nu\\0ll"\ndescription: "a\\x00b"\n"k\\0": 1\n',
        "README.md": b'---\ntags: ["x\\0y"]\n---\nHi\n',
        "pyproject.toml": b'[project]\nname = "p\\u0000q"\ndependencies = ["openenv-core"]\n',
    }, tags=["openenv", "t\u0000ag"], sdk="docker" + "x" * 100)
    run = services.hub_sync().run
    assert run.errors == 0, run.messages
    head = env("evil/nul").head
    assert (head.manifest_name, head.description, head.package_name) == ("null", "ab", "pq")
    assert head.manifest == {"name": "null", "description": "ab", "k": 1}
    assert "tag" in head.tags and len(head.sdk) == 32
    from django.test import Client
    refused = Client().get("/api/v1/environments/?q=%00")  # the API's parameters are strict: a clear 400
    assert refused.status_code == 400 and list(refused.json()["error"]["detail"]) == ["q"]
    assert Client().get("/environments/?q=a%00b").status_code == 200
    assert Client().get("/api/v1/environments/a%00/b/").status_code == 404
    assert Client().get("/environments/a%00/b/").status_code == 404


def test_a_listing_item_with_an_impossible_sha_or_id_is_skipped(corpus_stub):
    corpus_stub.put_space("evil/badsha", {"openenv.yaml": b"name: badsha\n"}, tags=["openenv"])
    corpus_stub.put_space("evil/fine", {"openenv.yaml": b"name: fine\n"}, tags=["openenv"])
    corpus_stub.inject(
        lambda r: r.kind == "list",
        status=200, times=None,
        body=json.dumps([{"id": "evil/badsha", "sha": "not-a-sha", "tags": ["openenv"]},
                         {"id": "../../etc", "sha": "a" * 40, "tags": ["openenv"]}]),
    )
    run = services.hub_sync().run
    assert run.found == 0 and run.errors == 0
    assert not Environment.objects.filter(key__in=["evil/badsha", "../../etc"]).exists()


def test_a_failed_existence_check_is_forgotten_once_the_hub_answers(corpus_stub, settings):
    services.hub_sync()
    settings.HUB_RETRY_ATTEMPTS = 1
    # echo_env leaves the listing, and space_info cannot say why.
    corpus_stub.set_private("openenv/echo_env")
    corpus_stub.inject("info", status=503, times=1, repo_id="openenv/echo_env")
    run = services.hub_sync().run
    assert (run.withdrawn, run.errors) == (0, 1)
    assert open_codes("openenv/echo_env") == ["hub.unavailable"]
    corpus_stub.set_private("openenv/echo_env", False)  # back in the listing, at the same sha
    run = services.hub_sync().run
    assert (run.unchanged, run.errors) == (34, 0)
    assert open_codes("openenv/echo_env") == []


def test_a_space_the_listing_missed_but_the_hub_confirms_is_counted(corpus_stub, monkeypatch):
    services.hub_sync()
    real = HubClient.list_environment_spaces

    def listing_without_echo(self):  # search ranking or eventual consistency: the Hub forgets one
        listing = real(self)
        listing.spaces.pop("openenv/echo_env")
        return listing

    monkeypatch.setattr(HubClient, "list_environment_spaces", listing_without_echo)
    corpus_stub.reset_requests()
    run = services.hub_sync().run
    assert (run.found, run.unchanged, run.withdrawn, run.errors) == (34, 34, 0, 0)
    assert corpus_stub.count("info", repo_id="openenv/echo_env") == 1


def test_an_unexpected_failure_on_a_new_space_is_recorded_and_shown(corpus_stub, monkeypatch):
    real = mf.read_package

    def explode_on_marker(files):
        if b"explode" in (files.get(mf.MANIFEST_FILE) or b""):
            raise RuntimeError("simulated indexer bug")
        return real(files)

    monkeypatch.setattr(mf, "read_package", explode_on_marker)
    sha = corpus_stub.put_space("bug/first", {"openenv.yaml": b"name: explode\n"}, tags=["openenv"])
    run = services.hub_sync().run
    assert (run.new, run.errors) == (34, 1)
    e = env("bug/first")
    assert e.head is None
    problem = e.problems.get(resolved_at__isnull=True)
    assert (problem.code, problem.sha) == ("index.internal_error", sha)
    assert "simulated indexer bug" in problem.message
    monkeypatch.setattr(mf, "read_package", real)  # the bug is fixed: the next sync indexes it
    assert services.hub_sync().run.new == 1
    assert env("bug/first").head.sha == sha and open_codes("bug/first") == []


def test_a_search_hit_without_manifest_is_not_an_environment(corpus_stub):
    corpus_stub.put_space("someone/openenv-notes", {"README.md": b"# Notes about openenv\n"}, tags=[])
    services.hub_sync()
    assert not Environment.objects.filter(key="someone/openenv-notes").exists()


def test_a_fixed_manifest_resolves_the_old_problem(corpus_stub):
    corpus_stub.put_space("evil/fixme", {"openenv.yaml": b"name: [oops\n"}, tags=["openenv"])
    services.hub_sync()
    assert open_codes("evil/fixme") == ["manifest.yaml_invalid"]
    corpus_stub.put_space("evil/fixme", {"openenv.yaml": b"name: fixed\n"}, tags=["openenv"])
    services.hub_sync()
    assert open_codes("evil/fixme") == []
    assert IndexProblem.objects.get(environment=env("evil/fixme")).resolved_at is not None
    assert env("evil/fixme").head.manifest_name == "fixed"


def test_index_space_command(corpus_stub, capsys):
    call_command("index_space", "openenv/echo_env")
    out = capsys.readouterr().out
    assert out.strip() == "openenv/echo_env: found 1, new 1, updated 0, unchanged 0, withdrawn 0, errors 0"
    corpus_stub.reset_requests()
    call_command("index_space", "openenv/echo_env")
    assert "unchanged 1" in capsys.readouterr().out
    assert corpus_stub.count("resolve") == 0

    corpus_stub.delete_space("openenv/echo_env")
    call_command("index_space", "openenv/echo_env")
    assert "withdrawn 1" in capsys.readouterr().out
    assert env("openenv/echo_env").status == Environment.Status.WITHDRAWN

    with pytest.raises(SystemExit) as exit_info:
        call_command("index_space", "nobody/nothing")
    assert exit_info.value.code == 1
    captured = capsys.readouterr()
    assert "found 0" in captured.out and "no such public Space" in captured.err


def test_sync_hub_command_prints_a_summary(corpus_stub, capsys, settings, tmp_path):
    settings.HUB_LOCAL_SOURCES = []
    call_command("sync_hub")
    out = capsys.readouterr().out
    assert f"hub ({corpus_stub.url}): found 34, new 34, updated 0, unchanged 0, withdrawn 0, errors 0" in out
    assert "local: found 0" in out

    # A Space the Hub keeps failing on is an error the exit status reports.
    corpus_stub.put_space("openenv/flaky", {"openenv.yaml": b"name: flaky\n"}, tags=["openenv"])
    corpus_stub.inject("resolve", status=500, times=None, repo_id="openenv/flaky")
    with pytest.raises(SystemExit) as exit_info:
        call_command("sync_hub", "--hub-only")
    assert exit_info.value.code == 1 and "errors 1" in capsys.readouterr().out
    with pytest.raises(CommandError):
        call_command("sync_hub", "--hub-only", "--local-only")
