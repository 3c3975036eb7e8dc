"""Writes to the index. Every function here is idempotent: running it twice changes nothing more.

Network reads happen before a transaction opens, never inside one. Each
environment is written in its own transaction, so one bad item never stops
or rolls back the others.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from registry import manifest as mf
from registry.folders import MAX_LISTED_FILES, local_package_digest, package_facts
from registry.hub import FileNotFound, HubClient, HubError, SpaceFacts, SpaceNotFound
from registry.models import (
    ID_PART,
    Environment,
    EnvironmentAlias,
    IndexProblem,
    OwnerAction,
    Revision,
    SyncRun,
    environment_key,
)
from registry.services.catalog import catalog_changed, environment_catalog_refresh, revision_readme_html
from registry.services.fanout import fan_out
from registry.services.heartbeat import Heartbeat
from registry.services.validation import validation_run_request

logger = logging.getLogger(__name__)

NEW, UPDATED, UNCHANGED, WITHDRAWN, ERROR, SKIPPED = "new", "updated", "unchanged", "withdrawn", "errors", "skipped"



@dataclass
class SyncSummary:
    """Counts a sync reports: found, new, updated, unchanged, withdrawn, errors.

    `skipped`: another sync of the same kind was running (`run` is that one), so this one did nothing.
    For one Space (space_index_by_id): `hub_sha`, the head the Hub reported ("" when it had no public Space or
    could not answer), and `transient`, whether asking again later may go better (the Hub failed, not the Space).
    """

    run: SyncRun
    skipped: bool = False
    hub_sha: str = ""
    transient: bool = False

    def __str__(self) -> str:
        r = self.run
        if self.skipped:
            return (f"skipped: {r.kind} sync #{r.pk} has been running since {r.started_at:%Y-%m-%d %H:%M:%S} UTC; "
                    "nothing was done")
        text = (f"found {r.found}, new {r.new}, updated {r.updated}, unchanged {r.unchanged}, "
                f"withdrawn {r.withdrawn}, errors {r.errors}")
        if not r.listing_complete:
            text += " (listing incomplete: nothing was withdrawn)"
        return text


# --- problems ---------------------------------------------------------------------------------------


def index_problem_record(*, environment: Environment, sha: str, problem: mf.Problem,
                         revision: Revision | None = None) -> IndexProblem:
    """Record a problem, or bump the open one with the same (environment, sha, code)."""
    open_ = IndexProblem.objects.filter(environment=environment, sha=sha, code=problem.code, resolved_at__isnull=True)
    for _ in range(2):
        # Counted in the database: concurrent writers seeing the same problem each add one.
        if open_.update(occurrences=F("occurrences") + 1, message=problem.message, last_seen_at=timezone.now()):
            existing = open_.first()
            if existing is not None:
                return existing
        try:
            with transaction.atomic():
                return IndexProblem.objects.create(
                    environment=environment, revision=revision, sha=sha, code=problem.code,
                    message=problem.message, transient=problem.transient,
                )
        except IntegrityError:
            continue  # a concurrent writer created it: bump that one
    raise RuntimeError("could not record index problem")


def _problems_resolve_except_head(environment: Environment) -> None:
    """Close problems that no longer describe the head: older revisions' and failed reads that later succeeded."""
    head_sha = environment.head.sha if environment.head else None
    stale = IndexProblem.objects.filter(environment=environment, resolved_at__isnull=True)
    if head_sha:
        stale = stale.filter(~Q(sha=head_sha) | Q(transient=True))
    stale.update(resolved_at=timezone.now())


# --- environments and revisions -----------------------------------------------------------------------


def environment_get_or_create(*, source: str, owner: str, name: str, known_new: bool = False) -> tuple[Environment, bool]:
    """The environment for owner/name (case-insensitive), created active if new.

    `known_new`: the caller just looked and found none (a sync's chunk), so the insert is tried first.
    """
    key = environment_key(owner, name)
    env = None if known_new else Environment.objects.filter(key=key).first()
    if env:
        return env, False
    try:
        with transaction.atomic():
            now = timezone.now()
            return Environment.objects.create(source=source, owner=owner, name=name, updated_at=now,
                                              changed_at=now), True
    except IntegrityError:
        return Environment.objects.get(key=key), False


def environment_withdraw(*, environment: Environment, reason: str) -> bool:
    """Mark an environment withdrawn (keeping all its history). Compare-and-set: True only if it was active."""
    now = timezone.now()
    changed = Environment.objects.filter(pk=environment.pk, status=Environment.Status.ACTIVE).update(
        status=Environment.Status.WITHDRAWN, status_reason=reason, status_changed_at=now, updated_at=now,
        changed_at=now,
    )
    if changed:
        catalog_changed()  # counted by status, shown by badges
        environment.refresh_from_db()
        logger.info("index: withdrew %s: %s", environment.repo_id, reason)
    return bool(changed)


def environment_rename(*, environment: Environment, owner: str, name: str, actor: str,
                       via: str) -> Environment | None:
    """Give an environment the id its Space moved to, keeping everything it has (revisions, runs, history).

    The old id becomes an alias that pages, the API and badges redirect to the new one, and the move is an
    OwnerAction of kind rename. Returns the environment (unchanged when it already had that id), or None when
    another environment holds the new id (the caller decides what to do with two).
    """
    new_key = environment_key(owner, name)
    try:
        with transaction.atomic():
            env = Environment.objects.select_for_update().get(pk=environment.pk)
            old_id, old_key = env.repo_id, env.key
            if (env.owner, env.name) == (owner, name):
                return env
            if new_key != old_key and Environment.objects.filter(key=new_key).exists():
                return None
            now = timezone.now()
            env.owner, env.name = owner, name
            env.updated_at = env.changed_at = now
            env.save()  # the key follows; its unique constraint settles a concurrent rename to the same id
            if new_key != old_key:
                # The new id is this environment's own again (a move back): it is no alias any more.
                EnvironmentAlias.objects.filter(key=new_key).delete()
                EnvironmentAlias.objects.update_or_create(key=old_key, defaults={"environment": env, "created_at": now})
            OwnerAction.objects.create(environment=env, kind=OwnerAction.Kind.RENAME, actor=actor, via=via,
                                       revision=env.head, detail={"from": old_id, "to": env.repo_id})
            environment_catalog_refresh(environment_id=env.pk)  # names are searched
            catalog_changed()  # badges and counts remember names
    except IntegrityError:
        return None
    logger.info("index: %s moved to %s", old_id, env.repo_id)
    environment.refresh_from_db()
    return env


def _environment_reactivate(environment: Environment) -> None:
    if environment.status != Environment.Status.ACTIVE:
        environment.status = Environment.Status.ACTIVE
        environment.status_reason = ""
        environment.status_changed_at = timezone.now()


# What recording a revision may change on its environment.
_RECORDED_FIELDS = ("head", "status", "status_reason", "status_changed_at", "updated_at", "changed_at",
                    "head_observed_at", "likes", "runtime_stage", "hub_last_modified", "last_seen_at")


def revision_record(*, environment: Environment, sha: str, facts: mf.PackageFacts, files: list[dict],
                    space: SpaceFacts | None = None, new_environment: bool = False) -> tuple[Revision, bool]:
    """Store what was read at `sha` as an immutable revision and make it head. Returns (revision, created).

    `new_environment`: the environment was created in the caller's transaction, so it has no revision,
    problem, run or tag yet, and nothing needs to be looked up, locked or cleared. Otherwise `environment`
    is read again once the revision is recorded.

    The head only moves on fresher news: facts the Hub gave before the environment was last
    written (a slow writer racing a webhook or a newer sync) are stored but do not move head.
    A Space reset to a sha indexed before is fresh news, and moves head back to it.
    """
    with transaction.atomic(savepoint=False):  # any failure here rolls back the caller's write too
        # A row this transaction inserted is invisible to others and its key is held by our insert: no lock needed.
        env = environment if new_environment else Environment.objects.select_for_update().get(pk=environment.pk)
        revision = None if new_environment else Revision.objects.filter(environment=env, sha=sha).first()
        created = revision is None
        if created:
            revision = Revision.objects.create(
                environment=env, sha=sha, content_digest=facts.content_digest, files=files,
                manifest_raw=facts.manifest_raw, manifest=facts.manifest, manifest_name=facts.manifest_name,
                readme_raw=facts.readme_raw, readme_front_matter=facts.readme_front_matter,
                readme_body=facts.readme_body, description=facts.description,
                package_name=facts.package_name, openenv_requirement=facts.openenv_requirement,
                space_id=space.repo_id if space else "",
                subdomain=space.subdomain if space else "",
                host=space.host if space else "",
                sdk=(space.sdk if space else str((facts.readme_front_matter or {}).get("sdk") or ""))[:32],
                tags=list(space.tags) if space else facts.tags,
                likes=space.likes if space else None,
                hub_created_at=space.created_at if space else None,
                hub_last_modified=space.last_modified if space else None,
                runtime_stage=space.runtime_stage if space else "",
            )
            for problem in facts.problems:
                index_problem_record(environment=env, sha=sha, problem=problem, revision=revision)
        # Both sides of the comparison are times the Hub spoke, never when we got round to writing:
        # a writer that sat on old news must not make fresher news, written after it, look stale.
        observed = space.observed_at if space is not None else None
        stale = bool(
            env.head_id is not None and env.head.sha != sha and observed and env.head_observed_at
            and observed < env.head_observed_at
        )
        head_moved = not stale and env.head_id != revision.pk
        if not stale:
            if head_moved or env.status != Environment.Status.ACTIVE:
                env.head = revision
                _environment_reactivate(env)
                env.updated_at = env.changed_at = timezone.now()
            # Local folders have no Hub: reading the folder now is the news.
            env.head_observed_at = max(filter(None, (env.head_observed_at, observed or timezone.now())))
            if space:
                env.likes, env.runtime_stage = space.likes, space.runtime_stage
                env.hub_last_modified = space.last_modified
        env.last_seen_at = timezone.now()
        env.save(update_fields=_RECORDED_FIELDS)
        if not new_environment:
            _problems_resolve_except_head(env)
        if created or head_moved:
            environment_catalog_refresh(environment_id=env.pk, locked=env, new=new_environment)
        if head_moved and settings.HUB_VALIDATE_NEW_REVISIONS:
            validation_run_request(revision=revision, trigger="new_revision")
    if created:
        revision_readme_html(revision_id=revision.pk, revision=revision)  # now, so that no reader waits for it
    if not new_environment:  # a new one is the object written above, except for its catalog summary
        environment.refresh_from_db()
    return revision, created


# --- the Hub ---------------------------------------------------------------------------------------------


def _read_space_files(client: HubClient, space: SpaceFacts) -> tuple[dict[str, bytes | None], SpaceFacts]:
    """Read the indexed files of a Space at its sha.

    The listing already named the files, so reading costs one request per file
    present; each read stops at its size cap, so a huge file costs no more than that.
    """
    if not space.files_known:
        space = client.space(space.repo_id, revision=space.sha)
    contents: dict[str, bytes | None] = {}
    for path in mf.PACKAGE_FILES:
        contents[path] = None
        if path in space.files:
            try:
                contents[path] = client.read_file(space.repo_id, path, sha=space.sha, cap=mf.FILE_CAPS[path])
            except FileNotFound:
                pass
    return contents, space


def space_index(*, client: HubClient, space: SpaceFacts, environment: Environment | None = None) -> str:
    """Index one listed Space at the sha the Hub reports. Returns new / updated / unchanged / withdrawn / errors.

    Reads files only when the sha is not indexed yet; otherwise refreshes the
    live facts (likes, runtime stage) and touches nothing else.
    """
    if environment is None:
        environment = Environment.objects.filter(key=space.repo_id.lower()).select_related("head").first()
    if environment and environment.source != Environment.Source.HUGGINGFACE:
        return _conflict(environment, space)
    if _is_current(environment, space):
        _live_facts_refresh([(environment, space)])
        return UNCHANGED
    is_new = environment is None or environment.head_id is None
    if environment is not None:
        known = Revision.objects.filter(environment=environment, sha=space.sha).first()
        if known is not None:
            # A revert to an already indexed sha, or a withdrawn Space that came back: nothing to download.
            revision_record(environment=environment, sha=space.sha, facts=_facts_of(known), files=known.files, space=space)
            return UPDATED
    try:
        contents, space = _read_space_files(client, space)
    except SpaceNotFound as exc:
        if environment:
            environment_withdraw(environment=environment, reason=f"Gone from the Hub while being read: {exc}")
            return WITHDRAWN
        return SKIPPED
    except HubError as exc:
        environment = environment or environment_get_or_create(
            source=Environment.Source.HUGGINGFACE, owner=space.owner, name=space.name)[0]
        index_problem_record(environment=environment, sha=space.sha, problem=mf.Problem(
            "hub.unavailable" if exc.transient else "hub.error",
            f"Could not read the Space at {space.sha[:12]}: {exc}. It will be retried on the next sync.",
            transient=True,
        ))
        return ERROR
    facts = mf.read_package(contents)
    if contents[mf.MANIFEST_FILE] is None and not space.is_tagged():
        # Found by search only, and the manifest is gone: not an environment any more.
        if environment:
            environment_withdraw(environment=environment, reason="No longer an environment: no openenv.yaml and no openenv tag.")
            return WITHDRAWN
        return SKIPPED
    files = [{"path": p, "size": s} for p, s in sorted(space.files.items())[:MAX_LISTED_FILES]]
    with transaction.atomic():  # one commit for a new environment and its first revision
        created = False
        if environment is None:
            environment, created = environment_get_or_create(
                source=Environment.Source.HUGGINGFACE, owner=space.owner, name=space.name, known_new=True)
        revision_record(environment=environment, sha=space.sha, facts=facts, files=files, space=space,
                        new_environment=created)
    return NEW if is_new else UPDATED


def _facts_of(revision: Revision) -> mf.PackageFacts:
    return mf.PackageFacts(
        manifest_raw=revision.manifest_raw, manifest=revision.manifest, manifest_name=revision.manifest_name,
        readme_raw=revision.readme_raw, readme_front_matter=revision.readme_front_matter,
        readme_body=revision.readme_body, description=revision.description, package_name=revision.package_name,
        openenv_requirement=revision.openenv_requirement, tags=list(revision.tags),
        content_digest=revision.content_digest,
    )


def _conflict(environment: Environment, space: SpaceFacts) -> str:
    index_problem_record(environment=environment, sha=space.sha, problem=mf.Problem(
        "index.name_conflict",
        f"The Hub Space {space.repo_id} has the same id as this {environment.get_source_display().lower()} "
        "environment; the Space was not indexed.",
    ))
    return ERROR


def _is_current(environment: Environment | None, space: SpaceFacts) -> bool:
    """The environment is active and its head is the sha the Hub reports: nothing to read."""
    return bool(environment and environment.head and environment.head.sha == space.sha
                and environment.status == Environment.Status.ACTIVE
                and environment.source == Environment.Source.HUGGINGFACE)


def _live_facts_refresh(items: list[tuple[Environment, SpaceFacts]]) -> None:
    """Likes and runtime stage change without a commit: keep them current without touching revisions.

    One transaction for the whole batch, and only rows whose facts changed are rewritten.
    """
    now = timezone.now()
    changed = []
    for env, space in items:
        if (env.likes, env.runtime_stage, env.hub_last_modified) != (space.likes, space.runtime_stage, space.last_modified):
            env.likes, env.runtime_stage, env.hub_last_modified = space.likes, space.runtime_stage, space.last_modified
            changed.append(env)
    with transaction.atomic():
        Environment.objects.bulk_update(changed, ["likes", "runtime_stage", "hub_last_modified"], batch_size=500)
        for start in range(0, len(items), 1000):
            batch = items[start:start + 1000]
            ids = [env.pk for env, _ in batch]
            # The Hub confirmed head at that time: never later than the oldest word in the batch, and a
            # fresher head another writer recorded meanwhile is kept (the database takes the greater).
            observed = min((space.observed_at for _, space in batch if space.observed_at), default=None)
            head_news = ({"head_observed_at": Greatest(Coalesce("head_observed_at", Value(observed)), Value(observed))}
                         if observed else {})
            Environment.objects.filter(pk__in=ids).update(last_seen_at=now, **head_news)
            # The Hub answered for these Spaces: earlier failures to reach it no longer describe them.
            IndexProblem.objects.filter(environment_id__in=ids, transient=True, resolved_at__isnull=True).update(
                resolved_at=now)
        if changed:
            catalog_changed()  # likes and runtime stages are sorted and counted by the catalog


def _withdraw_if_gone(client: HubClient, environment: Environment) -> str:
    """A Space missing from a complete listing: ask the Hub directly before withdrawing it."""
    try:
        space = client.space(environment.repo_id)
    except SpaceNotFound:
        environment_withdraw(environment=environment, reason="Gone from the Hub: deleted, renamed or made private.")
        return WITHDRAWN
    except HubError as exc:
        index_problem_record(environment=environment, sha=environment.head.sha if environment.head else "",
                             problem=mf.Problem("hub.unavailable", f"Could not confirm the Space still exists: {exc}.",
                                                transient=True))
        return ERROR
    if space.private:
        environment_withdraw(environment=environment, reason="Made private on the Hub.")
        return WITHDRAWN
    if not space.is_tagged() and mf.MANIFEST_FILE not in space.files:
        environment_withdraw(environment=environment, reason="No longer an environment: no openenv.yaml and no openenv tag.")
        return WITHDRAWN
    # Still an environment; the listing just did not show it (search ranking, eventual consistency).
    return space_index(client=client, space=space, environment=environment)


class SyncTakenOver(Exception):
    """This sync was presumed dead (no heartbeat) and another one may have started: stop writing."""


def _sync_run_begin(kind: str, target: str) -> tuple[SyncRun, bool]:
    """Start a sync of `kind`: (the new run, True), or (the one already running, False).

    A full sync (hub, local) runs alone: the database allows one running row
    per kind, so two starters race on an insert and one loses. A running row
    whose heartbeat is older than HUB_SYNC_STALE_S belonged to a process that
    died; it is marked abandoned (compare-and-set on its heartbeat) first.
    """
    now = timezone.now()
    if kind in SyncRun.EXCLUSIVE_KINDS:
        stale = now - timedelta(seconds=settings.HUB_SYNC_STALE_S)
        SyncRun.objects.filter(kind=kind, state=SyncRun.State.RUNNING, heartbeat_at__lt=stale).update(
            state=SyncRun.State.ABANDONED, finished_at=now)
    try:
        with transaction.atomic():
            return SyncRun.objects.create(kind=kind, target=target[:300], heartbeat_at=now), True
    except IntegrityError:
        running = SyncRun.objects.filter(kind=kind, state=SyncRun.State.RUNNING).first()
        if running is None:  # it finished between our insert and this read: one more try
            return _sync_run_begin(kind, target)
        logger.warning("sync: %s sync #%s is still running; this one does nothing", kind, running.pk)
        return running, False


def _sync_heartbeat(run: SyncRun) -> Heartbeat:
    def beat() -> None:
        if not SyncRun.objects.filter(pk=run.pk, state=SyncRun.State.RUNNING).update(heartbeat_at=timezone.now()):
            raise SyncTakenOver(f"{run.kind} sync #{run.pk} was presumed dead and abandoned")
    return Heartbeat(beat, settings.HUB_SYNC_HEARTBEAT_S, name=f"sync-{run.pk}", lost_on=SyncTakenOver)


def _sync_run_finish(run: SyncRun, counts: Counter, *, messages: list[str] | None = None) -> SyncSummary:
    """Write the counts; the state moves to finished only from running (an abandoned run stays abandoned)."""
    messages = list(messages or [])
    values = {field: counts[field] for field in ("found", "new", "updated", "unchanged", "withdrawn", "errors")}
    values["errors"] += len(messages)
    values.update(messages=messages, finished_at=timezone.now())
    if not SyncRun.objects.filter(pk=run.pk, state=SyncRun.State.RUNNING).update(state=SyncRun.State.FINISHED,
                                                                                   **values):
        SyncRun.objects.filter(pk=run.pk).update(**values)
    run.refresh_from_db()
    return SyncSummary(run)


def hub_sync(*, client: HubClient | None = None) -> SyncSummary:
    """Reconcile the index with the Hub: index new and changed Spaces, refresh the rest, withdraw what left.

    Spaces to read are indexed on HUB_SYNC_CONCURRENCY threads sharing one client (so a 429 slows them all);
    known environments are loaded a chunk at a time, so memory does not grow with the catalog beyond the
    listing. Withdrawal happens only after a complete listing, and only once space_info confirms the Space is
    gone, private, or no longer an environment.
    """
    client = client or HubClient()
    run, started = _sync_run_begin(SyncRun.Kind.HUB, client.endpoint)
    if not started:
        return SyncSummary(run, skipped=True)
    counts: Counter = Counter()
    messages: list[str] = []
    with _sync_heartbeat(run) as beat:
        try:
            listing = client.list_environment_spaces()
            messages += listing.errors
            SyncRun.objects.filter(pk=run.pk).update(listing_complete=listing.complete)
            counts["found"] += len(listing.spaces)

            def index(item: tuple[SpaceFacts, Environment | None]) -> str:
                return _index_guarded(client, *item)

            fan_out(_spaces_to_read(listing.spaces, counts, beat), index, workers=settings.HUB_SYNC_CONCURRENCY,
                    on_result=lambda outcome: counts.update([outcome]), check=beat.check)
            if listing.complete:
                for env in _missing_from(listing.spaces):
                    beat.check()
                    outcome = _guarded(lambda env=env: _withdraw_if_gone(client, env), env.repo_id, env)
                    if outcome in (NEW, UPDATED, UNCHANGED):  # still there: the listing just did not show it
                        counts["found"] += 1
                    if outcome != SKIPPED:
                        counts[outcome] += 1
        except SyncTakenOver as exc:
            messages.append(f"Stopped early: {exc}; another sync may have started.")
        except Exception as exc:
            _sync_run_finish(run, counts, messages=[*messages, f"The sync failed: {type(exc).__name__}: {exc}"])
            raise
    return _sync_run_finish(run, counts, messages=messages)


# Known environments are compared with the listing this many at a time.
SYNC_CHUNK = 1000
# What a sync needs of a known environment; the head's big columns (README, manifest) are never loaded.
_SYNC_FIELDS = ("id", "key", "source", "owner", "name", "status", "head_id", "head__sha", "likes", "runtime_stage",
                "hub_last_modified", "head_observed_at")


def _spaces_to_read(spaces: dict[str, SpaceFacts], counts: Counter, beat: Heartbeat):
    """The listed Spaces whose head is not indexed yet, with their environment (None when new).

    The rest only get their live facts refreshed, a chunk per transaction, here.
    """
    keys = list(spaces)
    for start in range(0, len(keys), SYNC_CHUNK):
        beat.check()
        chunk = keys[start:start + SYNC_CHUNK]
        known = {env.key: env for env in Environment.objects.filter(key__in=chunk, source=Environment.Source.HUGGINGFACE)
                 .select_related("head").only(*_SYNC_FIELDS)}
        unchanged: list[tuple[Environment, SpaceFacts]] = []
        for key in chunk:
            env, space = known.get(key), spaces[key]
            if _is_current(env, space):
                unchanged.append((env, space))
            else:
                yield space, env
        _live_facts_refresh(unchanged)
        counts[UNCHANGED] += len(unchanged)


def _missing_from(spaces: dict[str, SpaceFacts]):
    """Active Hub environments the listing did not show."""
    active = (Environment.objects.filter(source=Environment.Source.HUGGINGFACE, status=Environment.Status.ACTIVE)
              .order_by("pk").values_list("pk", "key"))
    missing = [pk for pk, key in active.iterator(chunk_size=SYNC_CHUNK) if key not in spaces]
    for start in range(0, len(missing), SYNC_CHUNK):
        yield from Environment.objects.filter(pk__in=missing[start:start + SYNC_CHUNK]).select_related("head").order_by("pk")


def _index_guarded(client: HubClient, space: SpaceFacts, env: Environment | None) -> str:
    def environment() -> Environment:
        return env or environment_get_or_create(source=Environment.Source.HUGGINGFACE, owner=space.owner,
                                                name=space.name)[0]
    return _guarded(lambda: space_index(client=client, space=space, environment=env), space.repo_id,
                    environment, sha=space.sha)


def _guarded(fn, label: str, env: Environment | Callable[[], Environment] | None, *, sha: str | None = None) -> str:
    """Run one item's indexing; an unexpected error is logged and recorded, and the sync goes on.

    `env` may be a callable that finds or creates the environment, so that a failure on an item seen
    for the first time is recorded (and shown) too, not lost with the rolled-back transaction.
    """
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - one bad item never stops the others
        logger.exception("index: %s failed", label)
        try:
            target = env() if callable(env) else env
            if target is not None:
                at = sha if sha is not None else (target.head.sha if target.head else "")
                index_problem_record(environment=target, sha=at, problem=mf.Problem(
                    "index.internal_error",
                    f"Indexing failed unexpectedly ({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); "
                    "it will be retried on the next sync.", transient=True))
        except Exception:  # noqa: BLE001
            logger.exception("index: could not record the failure of %s", label)
        return ERROR


def space_index_by_id(*, repo_id: str, client: HubClient | None = None, moved_from: str = "",
                      actor: str = "hub", via: str = OwnerAction.Via.WEBHOOK) -> SyncSummary:
    """Index one Space by id, as a webhook or an operator would ask: same rules as a full sync, for one item.

    What the Hub says now decides: its current head is indexed (the head never moves to a sha the Hub no longer
    serves), a Space it does not show publicly is withdrawn, one it shows again comes back. With `moved_from`
    (the Space moved from that id), the environment indexed under the old id is first renamed to the id the
    Hub confirms, keeping its history; without that confirmation nothing is renamed.
    """
    client = client or HubClient()
    run, _ = _sync_run_begin(SyncRun.Kind.SPACE, repo_id)
    counts: Counter = Counter()
    env = Environment.objects.filter(key=repo_id.lower()).select_related("head").first()
    messages: list[str] = []
    try:
        space = client.space(repo_id)
    except SpaceNotFound:
        if env and environment_withdraw(environment=env, reason="Gone from the Hub: deleted, renamed or made private."):
            counts[WITHDRAWN] += 1
        elif not env:
            messages.append(f"{repo_id}: no such public Space on the Hub.")
        return _sync_run_finish(run, counts, messages=messages)
    except HubError as exc:
        messages.append(f"{repo_id}: {exc}")
        summary = _sync_run_finish(run, counts, messages=messages)
        summary.transient = exc.transient
        return summary
    if moved_from:
        env, note = _environment_follow_move(moved_from, space, env, actor=actor, via=via)
        if note:
            messages.append(note)
    if space.private or (not space.is_tagged() and mf.MANIFEST_FILE not in space.files):
        if env:
            counts[_withdraw_if_gone(client, env)] += 1
        else:
            messages.append(f"{repo_id}: not an OpenEnv environment (no openenv tag and no openenv.yaml at the root).")
        summary = _sync_run_finish(run, counts, messages=messages)
        summary.hub_sha = space.sha
        return summary
    counts["found"] += 1
    outcome = _index_guarded(client, space, env)
    if outcome != SKIPPED:
        counts[outcome] += 1
    summary = _sync_run_finish(run, counts, messages=messages)
    summary.hub_sha, summary.transient = space.sha, outcome == ERROR
    return summary


def _environment_follow_move(moved_from: str, space: SpaceFacts, env: Environment | None, *, actor: str,
                             via: str) -> tuple[Environment | None, str]:
    """Rename the environment of `moved_from` to the Space's id, now that the Hub confirmed it. Returns the
    environment to index under the new id, and a note when the move could not be followed as asked."""
    old = Environment.objects.filter(key=moved_from.lower(), source=Environment.Source.HUGGINGFACE).first()
    if old is None or (old.owner, old.name) == (space.owner, space.name):
        return env, ""  # nothing indexed under the old id, or already renamed (a replay)
    renamed = environment_rename(environment=old, owner=space.owner, name=space.name, actor=actor, via=via)
    if renamed is not None:
        return Environment.objects.select_related("head").get(pk=renamed.pk), ""
    # Another environment already holds the new id (the reconcile indexed the Space there before this move was
    # handled, or an earlier Space had that id): each keeps its own history; the old id is gone from the Hub.
    environment_withdraw(environment=old, reason=f"Moved on the Hub to {space.repo_id}, indexed as its own entry.")
    return env, (f"{moved_from}: moved to {space.repo_id}, which was already indexed as another environment; "
                 f"{moved_from} was withdrawn and keeps its history.")


# --- local sources ----------------------------------------------------------------------------------------


def _local_sources() -> list[tuple[str, Path]]:
    """HUB_LOCAL_SOURCES entries, each `path` or `owner=path`; the owner defaults to 'local'."""
    sources = []
    for entry in settings.HUB_LOCAL_SOURCES:
        owner, sep, path = entry.partition("=")
        if not sep:
            owner, path = "local", entry
        sources.append((owner.strip() or "local", Path(path).expanduser()))
    return sources


def local_package_index(*, owner: str, folder: Path) -> str:
    """Index one local package folder; its revision is the digest of its content."""
    name = folder.name
    env = Environment.objects.filter(key=environment_key(owner, name)).select_related("head").first()
    if env and env.source != Environment.Source.LOCAL:
        index_problem_record(environment=env, sha="", problem=mf.Problem(
            "index.name_conflict", f"The local package {folder} has the same id as this Hub Space; it was not indexed."))
        return ERROR
    try:
        digest, listing = local_package_digest(folder)
    except (OSError, ValueError) as exc:
        env = env or environment_get_or_create(source=Environment.Source.LOCAL, owner=owner, name=name)[0]
        index_problem_record(environment=env, sha="", problem=mf.Problem("local.unreadable", f"Could not read {folder}: {exc}."))
        return ERROR
    if env and env.head and env.head.sha == digest and env.status == Environment.Status.ACTIVE:
        Environment.objects.filter(pk=env.pk).update(last_seen_at=timezone.now())
        return UNCHANGED
    is_new = env is None or env.head_id is None
    facts = package_facts(folder)
    if env is None:
        env, _ = environment_get_or_create(source=Environment.Source.LOCAL, owner=owner, name=name)
    if env.local_path != str(folder):
        Environment.objects.filter(pk=env.pk).update(local_path=str(folder))
    revision_record(environment=env, sha=digest, facts=facts, files=listing)
    return NEW if is_new else UPDATED


def local_index_by_id(*, repo_id: str) -> SyncSummary | None:
    """Index one folder of a local source by its id (`owner/name`), as `space_index_by_id` does for a Space;
    None when no local source has that owner (the id is then a Hub id)."""
    owner, _, name = repo_id.partition("/")
    roots = [root for source_owner, root in _local_sources() if source_owner.lower() == owner.lower()]
    if not roots:
        return None
    run, _ = _sync_run_begin(SyncRun.Kind.SPACE, repo_id)
    counts: Counter = Counter()
    folder = next((root / name for root in roots if (root / name / mf.MANIFEST_FILE).is_file()), None)
    if folder is None or not re.fullmatch(ID_PART, name):
        return _sync_run_finish(run, counts, messages=[
            f"{repo_id}: no folder {name!r} with an openenv.yaml in the local source(s) of {owner!r} "
            f"({', '.join(str(r) for r in roots)})."])
    counts["found"] += 1
    env = Environment.objects.filter(key=environment_key(owner, name)).first()
    counts[_guarded(lambda: local_package_index(owner=owner, folder=folder), str(folder), env)] += 1
    return _sync_run_finish(run, counts)


def local_sync() -> SyncSummary:
    """Index every package folder (a subfolder with an openenv.yaml) of every local source; withdraw removed ones."""
    run, started = _sync_run_begin(SyncRun.Kind.LOCAL, ":".join(str(p) for _, p in _local_sources()))
    if not started:
        return SyncSummary(run, skipped=True)
    with _sync_heartbeat(run):
        return _local_sync(run)


def _local_sync(run: SyncRun) -> SyncSummary:
    counts: Counter = Counter()
    messages: list[str] = []
    seen: set[str] = set()
    unreadable: set[Path] = set()
    for owner, root in _local_sources():
        if not root.is_dir():
            messages.append(f"Local source {root} is not a folder; its environments are kept as they were.")
            unreadable.add(root.resolve())
            continue
        if not re.fullmatch(ID_PART, owner):
            messages.append(f"Local source {root}: owner {owner!r} is not a valid id part "
                            "(letters, digits, '_', '.', '-'); the source was skipped.")
            continue
        for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
            if not (folder / mf.MANIFEST_FILE).is_file():
                continue
            if not re.fullmatch(ID_PART, folder.name):
                messages.append(f"{folder}: {folder.name!r} is not a valid environment name (letters, digits, "
                                "'_', '.', '-', at most 96); not indexed.")
                continue
            counts["found"] += 1
            key = environment_key(owner, folder.name)
            env = Environment.objects.filter(key=key).first()
            if key in seen:
                # Two sources hold a folder of the same name for one owner: the first one listed wins.
                messages.append(f"{folder}: {key} is already indexed from an earlier local source; not indexed.")
                if env is not None:
                    index_problem_record(environment=env, sha="", problem=mf.Problem(
                        "local.duplicate_name",
                        f"{folder} has the same id as {env.local_path}, which an earlier local source provides; "
                        "it was not indexed. Give it another folder name or owner (`owner=path`)."))
                continue
            seen.add(key)
            counts[_guarded(lambda o=owner, f=folder: local_package_index(owner=o, folder=f), str(folder), env)] += 1
    for env in Environment.objects.filter(source=Environment.Source.LOCAL, status=Environment.Status.ACTIVE):
        # A source that is briefly unreadable (an unmounted volume) must not withdraw everything in it.
        if env.key not in seen and Path(env.local_path).parent.resolve() not in unreadable:
            environment_withdraw(environment=env, reason="Removed from its local source.")
            counts[WITHDRAWN] += 1
    return _sync_run_finish(run, counts, messages=messages)
