"""Reads from the index, shared by the web pages, the API and the commands."""

from __future__ import annotations

from django.db.models import Prefetch, Q, QuerySet

from registry.models import Environment, IndexProblem, Revision, SyncRun, environment_key

# Hub tags that say where a Space runs, not what it is.
_NOISE_TAG_PREFIXES = ("region:",)


def _open_problems() -> Prefetch:
    return Prefetch(
        "problems",
        queryset=IndexProblem.objects.filter(resolved_at__isnull=True).order_by("code", "id"),
        to_attr="open_problems",
    )


def environment_list(*, status: str | None = Environment.Status.ACTIVE, search: str = "",
                     source: str | None = None) -> QuerySet[Environment]:
    """Environments for the catalog and the API, most recently updated first, with head and open problems loaded."""
    qs = Environment.objects.select_related("head").prefetch_related(_open_problems())
    if status:
        qs = qs.filter(status=status)
    if source:
        qs = qs.filter(source=source)
    if search:
        qs = qs.filter(
            Q(key__icontains=search) | Q(head__manifest_name__icontains=search)
            | Q(head__description__icontains=search)
        )
    return qs.order_by("-updated_at", "key")


def environment_get(*, owner: str, name: str) -> Environment | None:
    """One environment by owner/name, case-insensitively, with head, open problems and revisions loaded."""
    return (
        Environment.objects.select_related("head")
        .prefetch_related(_open_problems(), Prefetch("revisions", queryset=Revision.objects.order_by("-indexed_at", "-id")))
        .filter(key=environment_key(owner, name))
        .first()
    )


def environment_tags(environment: Environment) -> list[str]:
    """The tags to show: the head revision's, without placement noise such as region:us."""
    head = environment.head
    tags = head.tags if head else []
    return [t for t in tags if not t.startswith(_NOISE_TAG_PREFIXES)]


def sync_run_latest(*, kind: str) -> SyncRun | None:
    """The most recent finished sync of a kind, for the catalog's status line."""
    return SyncRun.objects.filter(kind=kind, state=SyncRun.State.FINISHED).order_by("-finished_at", "-id").first()
