"""The catalog summary of an environment: what the catalog shows and filters by, derived from the index.

An environment's verdict, last known good run, mode, MCP tools, measured
latency, tags and search vector follow from its head revision and its
validation runs. They are recomputed here, and only here, whenever either
changes (a head moves, a run finishes), under the environment's row lock, so
that concurrent writers converge on what is committed.
"""

from __future__ import annotations

import logging
from html import escape

from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction
from django.db.models import Case, Value, When
from django.utils import timezone

from registry import readme
from registry.models import Environment, EnvironmentSearch, EnvironmentTag, Revision, RevisionReadme, ValidationRun
from registry.selectors import CATALOG_VERSION_KEY, display_tags

logger = logging.getLogger(__name__)

# How much README text the search index takes (PostgreSQL's tsvector holds at most 1 MiB), and how much of the
# Markdown is read to find it: every summary refresh reads it again, and parsing is linear but not cheap on
# hostile input (about 10 s for 1 MiB of brackets), so the work per refresh is bounded.
SEARCH_README_CHARS = 32_000
SEARCH_README_SOURCE_CHARS = 4 * SEARCH_README_CHARS
# The environment page shows a README under its own <h2>: the README's headings start at <h3>.
README_TOP_HEADING = 3
# What a README that fails to render shows instead: its beginning, as plain text.
UNRENDERED_README_CHARS = 20_000


def _check(report: dict | None, check_id: str) -> dict:
    for result in (report or {}).get("results", []):
        if result.get("check_id") == check_id:
            return result
    return {}


def _measured(report: dict | None, check_id: str) -> dict:
    measured = _check(report, check_id).get("measured")
    return measured if isinstance(measured, dict) else {}


def _finished(environment_id: int):
    return ValidationRun.objects.filter(environment_id=environment_id, state=ValidationRun.State.FINISHED)


def environment_catalog_refresh(*, environment_id: int, locked: Environment | None = None, new: bool = False) -> None:
    """Recompute the catalog summary of one environment from its head and its finished runs.

    `locked`: the environment, already locked by the caller's transaction with its head set (the indexer
    holds it while it records a revision), so that it is not read again. `new`: it was created in that
    transaction, so it has no runs and no tags to look up.
    """
    with transaction.atomic(savepoint=False):  # a caller's failure or ours rolls back the whole write anyway
        env = locked or (Environment.objects.select_for_update(of=("self",)).select_related("head")
                         .defer("head__readme_raw", "head__manifest_raw", "head__files").get(pk=environment_id))
        head = env.head
        runs = _finished(env.pk).defer("observed")
        verdict = None if new else (
            runs.annotate(on_head=Case(When(revision_id=env.head_id, then=Value(0)), default=Value(1)))
            .order_by("on_head", "-finished_at", "-id").first())
        # A yanked revision is never the last known good: its owners said not to use it.
        good = None if new else (runs.filter(outcome=ValidationRun.Outcome.PASS, revision__yank__isnull=True)
                                 .order_by("-finished_at", "-id").first())
        report = verdict.report if verdict else None
        episode = _measured(good.report if good else None, "hub.ws_episode")
        p50 = (episode.get("step_latency_s") or {}).get("p50") if isinstance(episode.get("step_latency_s"), dict) else None
        mcp = _measured(report, "hub.mcp_endpoint").get("mcp")
        tools = _measured(report, "hub.mcp_tools").get("tools")
        mode = _measured(report, "hub.http_mode").get("mode")
        Environment.objects.filter(pk=env.pk).update(
            verdict_run=verdict, verdict_outcome=verdict.outcome if verdict else "",
            validated_at=verdict.finished_at if verdict else None, good_run=good,
            mode=mode if mode in ("simulation", "production") else "",
            has_mcp=mcp if isinstance(mcp, bool) else None,
            mcp_tools=[t for t in tools if isinstance(t, str)][:100] if isinstance(tools, list) else [],
            step_p50_ms=round(p50 * 1000, 3) if isinstance(p50, (int, float)) else None,
            openenv_requirement=head.openenv_requirement if head else "",
            changed_at=timezone.now(),
        )
        tags = sorted(set(display_tags(head.tags if head else [])))[:100]
        if not new:
            EnvironmentTag.objects.filter(environment_id=env.pk).exclude(tag__in=tags).delete()
        EnvironmentTag.objects.bulk_create([EnvironmentTag(environment_id=env.pk, tag=t[:100]) for t in tags],
                                           ignore_conflicts=True)
        if connection.vendor == "postgresql":
            _search_vector_refresh(env, head, tags, tools if isinstance(tools, list) else [])
    catalog_changed()


def catalog_changed() -> None:
    """Something the catalog shows changed: once committed, counts cached for the old catalog are not used again
    (bumped after commit, so that nobody caches the old data under the new version)."""
    def bump() -> None:
        try:
            cache.incr(CATALOG_VERSION_KEY)
        except ValueError:  # no version yet (or it was evicted)
            cache.add(CATALOG_VERSION_KEY, 1, timeout=None)

    transaction.on_commit(bump, robust=True)


def _search_vector_refresh(env: Environment, head, tags: list[str], tools: list) -> None:
    """Weights: A the names (owner, name, manifest name), B the description, tags and MCP tool names, C the README.

    Names use the `simple` configuration (no stemming: `chess_env` stays chess, env); prose uses `english`.
    """
    names = " ".join([env.owner, env.name, env.name.replace("_", " ").replace("-", " "),
                      head.manifest_name if head else ""])
    described = " ".join([head.description if head else "", " ".join(tags), " ".join(str(t) for t in tools)])
    text = (readme.readme_text(head.readme_body[:SEARCH_README_SOURCE_CHARS], limit=SEARCH_README_CHARS)
            if head else "")
    # One statement: insert or replace the row, the vectors computed by the database (the summary once).
    with connection.cursor() as cursor:
        cursor.execute(
            f'INSERT INTO "{EnvironmentSearch._meta.db_table}" ("environment_id", "summary", "vector") '
            "SELECT %s, summary, summary || setweight(to_tsvector('english'::regconfig, %s), 'C') FROM ("
            "SELECT setweight(to_tsvector('simple'::regconfig, %s), 'A') "
            "|| setweight(to_tsvector('english'::regconfig, %s), 'B') AS summary) AS parts "
            'ON CONFLICT ("environment_id") DO UPDATE SET "summary" = EXCLUDED."summary", '
            '"vector" = EXCLUDED."vector"',
            [env.pk, text, names, described])


def catalog_refresh_all(*, batch: int = 500) -> int:
    """Recompute every environment's summary (after a deployment that changed how it is derived)."""
    count = 0
    for pk in Environment.objects.order_by("pk").values_list("pk", flat=True).iterator(chunk_size=batch):
        environment_catalog_refresh(environment_id=pk)
        count += 1
    return count


def revision_readme_html(*, revision_id: int, revision: Revision | None = None) -> str:
    """A revision's README as safe HTML: rendered and stored once (when the revision is indexed, or the first
    time it is asked for after the renderer changed), so a page view seldom renders Markdown at all.

    The indexer passes the `revision` it has just created (with its environment): nothing is stored for it
    yet, so it is rendered and stored without reading anything back.
    """
    if revision is None:
        stored = (RevisionReadme.objects.filter(revision_id=revision_id, renderer_version=readme.RENDERER_VERSION)
                  .values_list("html", flat=True).first())
        if stored is not None:
            return stored
        revision = (Revision.objects.select_related("environment").only(
            "sha", "readme_body", "environment__owner", "environment__name", "environment__source")
            .get(pk=revision_id))
    env = revision.environment
    repo = (readme.RepoRef(owner=env.owner, name=env.name, sha=revision.sha, endpoint=settings.HF_ENDPOINT)
            if env.source == Environment.Source.HUGGINGFACE else None)
    try:
        html = readme.render_readme(revision.readme_body, repo=repo, top_heading=README_TOP_HEADING)
    except Exception:  # the renderer's bug must not cost the page: show the text, say so, log it
        logger.exception("readme: revision %s could not be rendered", revision_id)
        html = ('<p class="notice">This README could not be rendered; its beginning is shown as plain text.</p>'
                f"<pre>{escape(revision.readme_body[:UNRENDERED_README_CHARS])}</pre>")
    # One statement, and two renderers racing (an indexer and a page view) both succeed.
    RevisionReadme.objects.bulk_create(
        [RevisionReadme(revision_id=revision_id, renderer_version=readme.RENDERER_VERSION, html=html,
                        rendered_at=timezone.now())],
        update_conflicts=True, unique_fields=["revision"], update_fields=["renderer_version", "html", "rendered_at"])
    return html
