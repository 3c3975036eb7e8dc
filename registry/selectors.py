"""Reads from the index, shared by the web pages, the API and the commands."""

from __future__ import annotations

from django.db.models import Case, F, OuterRef, Prefetch, Q, QuerySet, Subquery, Value, When

from registry.models import Environment, IndexProblem, Revision, SyncRun, ValidationRun, environment_key

# Hub tags that say where a Space runs, not what it is.
_NOISE_TAG_PREFIXES = ("region:",)


# What a revision row shows in lists: never the README (up to 1 MiB), the raw manifest or the file list.
REVISION_SUMMARY_FIELDS = (
    "id", "environment_id", "sha", "indexed_at", "content_digest", "manifest_name", "package_name",
    "openenv_requirement", "space_id", "subdomain", "host", "sdk", "tags", "hub_last_modified", "runtime_stage",
)
# Columns of a revision that no list, page or endpoint shows: they are read where they are used (runners).
_REVISION_HEAVY_FIELDS = ("readme_raw", "readme_body", "readme_front_matter", "files")


def _heavy(prefix: str) -> list[str]:
    return [f"{prefix}__{name}" for name in _REVISION_HEAVY_FIELDS]


def _open_problems() -> Prefetch:
    return Prefetch(
        "problems",
        queryset=IndexProblem.objects.filter(resolved_at__isnull=True).order_by("code", "id"),
        to_attr="open_problems",
    )


def environment_list(*, status: str | None = Environment.Status.ACTIVE, search: str = "",
                     source: str | None = None) -> QuerySet[Environment]:
    """Environments for the catalog and the API, most recently updated first, with head and open problems loaded."""
    qs = Environment.objects.select_related("head").defer(*_heavy("head"), "head__manifest_raw").prefetch_related(
        _open_problems())
    if status:
        qs = qs.filter(status=status)
    if source:
        qs = qs.filter(source=source)
    search = search.replace("\x00", "")  # PostgreSQL text cannot hold NUL; no name or description has one
    if search:
        qs = qs.filter(
            Q(key__icontains=search) | Q(head__manifest_name__icontains=search)
            | Q(head__description__icontains=search)
        )
    return qs.order_by("-updated_at", "key")


def environment_get(*, owner: str, name: str) -> Environment | None:
    """One environment by owner/name, case-insensitively, with its head (without README and file list) and open
    problems loaded: two queries, whatever the number of revisions (they are listed by `revision_list`)."""
    return (
        Environment.objects.select_related("head").defer(*_heavy("head"))
        .prefetch_related(_open_problems())
        .filter(key=environment_key(owner, name))
        .first()
    )


def revision_list(*, environment: Environment) -> QuerySet[Revision]:
    """The environment's revisions, newest first, summary columns only (page or slice it)."""
    return (Revision.objects.filter(environment=environment).only(*REVISION_SUMMARY_FIELDS)
            .order_by("-indexed_at", "-id"))


def environment_tags(environment: Environment) -> list[str]:
    """The tags to show: the head revision's, without placement noise such as region:us."""
    head = environment.head
    tags = head.tags if head else []
    return [t for t in tags if not t.startswith(_NOISE_TAG_PREFIXES)]


def sync_run_latest(*, kind: str) -> SyncRun | None:
    """The most recent finished sync of a kind, for the catalog's status line."""
    return SyncRun.objects.filter(kind=kind, state=SyncRun.State.FINISHED).order_by("-finished_at", "-id").first()


def _latest_finished(environment_ref) -> QuerySet[ValidationRun]:
    """Finished runs of an environment, the head revision's first, newest first."""
    return (
        ValidationRun.objects.filter(environment=environment_ref, state=ValidationRun.State.FINISHED)
        .annotate(on_head=Case(When(revision_id=F("environment__head_id"), then=Value(0)), default=Value(1)))
        .order_by("on_head", "-finished_at", "-id")
    )


def environment_verdict(*, environment: Environment) -> ValidationRun | None:
    """The run whose outcome is the environment's verdict: the head revision's latest, else the latest of any revision."""
    return _latest_finished(environment).select_related("revision").defer(*_heavy("revision")).first()


def environments_with_verdicts(environments) -> list[Environment]:
    """Attach `.verdict` (a ValidationRun or None) to each environment, in two queries whatever the count."""
    environments = list(environments)
    ids = [env.pk for env in environments]
    latest = (
        Environment.objects.filter(pk__in=ids)
        .annotate(run_id=Subquery(_latest_finished(OuterRef("pk")).values("id")[:1]))
        .values_list("pk", "run_id")
    )
    run_ids = {pk: run_id for pk, run_id in latest if run_id}
    runs = (ValidationRun.objects.defer("report", *_heavy("revision"), "revision__manifest_raw")
            .select_related("revision").in_bulk(run_ids.values()))
    for env in environments:
        env.verdict = runs.get(run_ids.get(env.pk))
    return environments


def validation_run_live(*, environment: Environment) -> ValidationRun | None:
    """The queued or running validation of the environment's head, if any."""
    return ValidationRun.objects.filter(
        environment=environment, revision_id=environment.head_id, state__in=ValidationRun.LIVE_STATES,
    ).first()


def validation_run_list(*, environment: Environment) -> QuerySet[ValidationRun]:
    """The environment's runs, newest first, without reports (page or slice it)."""
    return (ValidationRun.objects.filter(environment=environment).select_related("revision")
            .defer("report", *_heavy("revision"), "revision__manifest_raw", "revision__manifest"))


def validation_run_get(*, environment: Environment, run_id: int) -> ValidationRun | None:
    """One run with its report."""
    return (ValidationRun.objects.filter(environment=environment, pk=run_id).select_related("revision")
            .defer(*_heavy("revision")).first())
