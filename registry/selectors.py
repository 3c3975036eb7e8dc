"""Reads from the index, shared by the web pages, the API and the commands.

The catalog's search, facets and sorts live here once (`CatalogQuery`,
`catalog_matches`, `catalog_facets`), so that a page, an API list and a
badge that describe the same environments can never disagree.
"""

from __future__ import annotations

import functools
import hashlib
import json
import operator
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from django.contrib.postgres.search import SearchQuery, SearchVectorField, TrigramWordSimilarity
from django.core.cache import cache
from django.core.paginator import Page, Paginator
from django.db import connection
from django.db.models import (
    BooleanField,
    Case,
    Count,
    Exists,
    F,
    FloatField,
    Func,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Cast, Coalesce, Greatest
from django.urls import reverse

from registry import badges, discovery
from registry.models import (
    Evaluation,
    Environment,
    EnvironmentAlias,
    EnvironmentTag,
    IndexProblem,
    OwnerAction,
    Revision,
    SyncRun,
    ValidationRun,
    environment_key,
)

# What a revision row shows in lists: never the README (up to 1 MiB), the raw manifest or the file list.
REVISION_SUMMARY_FIELDS = (
    "id", "environment_id", "sha", "indexed_at", "content_digest", "manifest_name", "package_name",
    "openenv_requirement", "space_id", "subdomain", "host", "sdk", "tags", "hub_last_modified", "runtime_stage",
)
# Columns of a revision that no list, page or endpoint shows: they are read where they are used (runners).
_REVISION_HEAVY_FIELDS = ("readme_raw", "readme_body", "readme_front_matter", "files")

SLEEPING_STAGES = ("SLEEPING", "PAUSED", "STOPPED")
# Hub tags that say where a Space runs, not what it is.
NOISE_TAG_PREFIXES = ("region:",)


def display_tags(tags: list) -> list[str]:
    """The tags people see: the Hub's, without placement noise such as region:us."""
    return [t for t in tags or [] if isinstance(t, str) and t and not t.startswith(NOISE_TAG_PREFIXES)]


def _heavy(prefix: str) -> list[str]:
    return [f"{prefix}__{name}" for name in _REVISION_HEAVY_FIELDS]


def _open_problems() -> Prefetch:
    return Prefetch(
        "problems",
        queryset=IndexProblem.objects.filter(resolved_at__isnull=True).order_by("code", "id"),
        to_attr="open_problems",
    )


# What a catalog card or an API list item reads, and nothing more: a list loads these columns for each of its
# environments, so every column read and every model built costs once per card.
CARD_FIELDS = (
    "id", "source", "owner", "name", "key", "status", "status_changed_at", "status_reason", "likes", "runtime_stage",
    "updated_at", "changed_at", "mode", "has_mcp", "step_p50_ms", "deprecated_at", "deprecation_reason",
    "successor", "head", "head__sha", "head__manifest_name", "head__description", "head__tags",
    "verdict_run", "verdict_run__outcome", "verdict_run__finished_at", "verdict_run__failing_checks",
    "verdict_run__revision", "verdict_run__revision__sha",
)


def _cards(qs: QuerySet[Environment], *, manifest: bool = False) -> QuerySet[Environment]:
    """What a catalog card or an API list item shows: the head's summary and the verdict run, in the same query
    (`manifest`: the whole environment, its head with the raw manifest and the head's yank, for its own page).
    Successors' names are read apart (`_name_successors`)."""
    qs = qs.select_related("head", "verdict_run", "verdict_run__revision")
    if not manifest:
        return qs.only(*CARD_FIELDS)
    return (qs.defer(*_heavy("head"), "verdict_run__report", "verdict_run__observed",
                     *_heavy("verdict_run__revision"), "verdict_run__revision__manifest_raw",
                     "verdict_run__revision__manifest")
            .annotate(head_yank_reason=F("head__yank__reason")))


def _name_successors(environments: list[Environment]) -> None:
    """Set `successor_owner` and `successor_name` on the deprecated among `environments` that name a successor:
    one query, and none when there is no such environment (they are few: a join on every lookup cost more)."""
    successors = {env.successor_id for env in environments if env.successor_id}
    if not successors:
        return
    names = {pk: (owner, name) for pk, owner, name
             in Environment.objects.filter(pk__in=successors).values_list("pk", "owner", "name")}
    for env in environments:
        if env.successor_id in names:
            env.successor_owner, env.successor_name = names[env.successor_id]


# --- the catalog: search, facets, sorts ---------------------------------------------------------------------

_JUDGED = ["pass", "warn", "fail", "error"]
# The verdict facet, as people read it: a sleeping Space with no verdict is not "broken", it is asleep. As
# conditions on the columns, for filtering (the planner has statistics for these, so a filtered page walks the
# index of its sort instead of sorting every row that passes), and as the value the facet counts group by.
VERDICT_WHERE = {
    "pass": Q(verdict_outcome="pass"), "warn": Q(verdict_outcome="warn"),
    "fail": Q(verdict_outcome__in=["fail", "error"]),
    "sleeping": ~Q(verdict_outcome__in=_JUDGED) & Q(runtime_stage__in=SLEEPING_STAGES),
    "unvalidated": ~Q(verdict_outcome__in=_JUDGED) & ~Q(runtime_stage__in=SLEEPING_STAGES),
}
VERDICT_FACET = Case(*(When(where, then=Value(verdict)) for verdict, where in VERDICT_WHERE.items()
                       if verdict != "unvalidated"), default=Value("unvalidated"))
VERDICTS = {"pass": "Passing", "warn": "Warnings", "fail": "Failing", "sleeping": "Sleeping",
            "unvalidated": "Not yet validated"}
MODES = {"simulation": "Simulation", "production": "Production"}
SORTS = {
    "relevance": "Relevance", "updated": "Recently updated", "likes": "Most liked",
    "latency": "Fastest step (p50)", "validated": "Recently validated", "name": "Name",
}
FACETS = ("verdict", "tag", "owner", "mode", "mcp", "stage", "openenv")  # in the order the page shows them
FACET_LIMIT = 12
MAX_QUERY_CHARS = 200
_TAG = re.compile(r"[^\x00-\x1f]{1,100}")


@dataclass(frozen=True)
class CatalogQuery:
    """One state of the catalog: the search text, the facet filters (values of one facet are alternatives,
    facets are all required) and the sort. Every state has one URL (`as_params`)."""

    q: str = ""
    verdict: tuple[str, ...] = ()
    tag: tuple[str, ...] = ()
    owner: tuple[str, ...] = ()
    mode: tuple[str, ...] = ()
    mcp: tuple[str, ...] = ()  # "yes" / "no"
    stage: tuple[str, ...] = ()
    openenv: tuple[str, ...] = ()
    sort: str = ""
    status: str | None = Environment.Status.ACTIVE
    source: str | None = None

    @property
    def effective_sort(self) -> str:
        return self.sort or ("relevance" if self.q else "updated")

    def without(self, facet: str, value: str | None = None) -> CatalogQuery:
        """This state without one facet's filter (or one value of it)."""
        values = getattr(self, facet)
        return replace(self, **{facet: () if value is None else tuple(v for v in values if v != value)})

    def toggled(self, facet: str, value: str) -> CatalogQuery:
        values = getattr(self, facet)
        return replace(self, **{facet: tuple(v for v in values if v != value) if value in values
                                else (*values, value)})

    def with_value(self, facet: str, value: str) -> CatalogQuery:
        values = getattr(self, facet)
        return self if value in values else replace(self, **{facet: (*values, value)})

    def with_sort(self, sort: str) -> CatalogQuery:
        return replace(self, sort=sort)

    def as_params(self) -> list[tuple[str, str]]:
        """The state as query parameters, in a stable order (shareable, cacheable URLs)."""
        params = [("q", self.q)] if self.q else []
        for facet in FACETS:
            params += [(facet, value) for value in sorted(getattr(self, facet))]
        if self.sort:
            params.append(("sort", self.sort))
        return params

    @property
    def filtered(self) -> bool:
        return bool(self.q or any(getattr(self, f) for f in FACETS))


def catalog_query_from_params(params: Mapping) -> tuple[CatalogQuery, list[str]]:
    """Read a catalog state from query parameters. Unknown parameters are ignored; a malformed value is dropped
    and named in the returned messages, so a hand-edited URL still shows something sensible, never an error."""
    messages: list[str] = []

    def values(name: str, allowed=None, pattern=None) -> tuple[str, ...]:
        raw = params.getlist(name) if hasattr(params, "getlist") else ([params[name]] if name in params else [])
        kept = []
        for value in raw[:20]:
            value = value.strip()
            if not value:
                continue
            if (allowed is not None and value not in allowed) or (pattern is not None and not pattern.fullmatch(value)):
                messages.append(f"Ignored {name}={value[:40]!r}: not one of the values this filter takes.")
                continue
            if value not in kept:
                kept.append(value)
        return tuple(kept)

    q = (params.get("q") or "").replace("\x00", "").strip()
    if len(q) > MAX_QUERY_CHARS:
        messages.append(f"The search was cut to its first {MAX_QUERY_CHARS} characters.")
        q = q[:MAX_QUERY_CHARS]
    sort = (params.get("sort") or "").strip()
    if sort and sort not in SORTS:
        messages.append(f"Ignored sort={sort[:40]!r}: sorts are {', '.join(SORTS)}.")
        sort = ""
    query = CatalogQuery(
        q=q, verdict=values("verdict", VERDICTS), tag=values("tag", pattern=_TAG),
        owner=values("owner", pattern=re.compile(r"[A-Za-z0-9_.-]{1,96}")), mode=values("mode", MODES),
        mcp=values("mcp", ("yes", "no")), stage=values("stage", pattern=re.compile(r"[A-Z_]{1,32}")),
        openenv=values("openenv", pattern=re.compile(r"[^\x00-\x1f]{1,200}")), sort=sort,
    )
    return query, messages


def _postgres() -> bool:
    return connection.vendor == "postgresql"


def _search_query(q: str) -> SearchQuery:
    # Names are indexed without stemming, prose with English stemming: match either.
    return (SearchQuery(q, search_type="websearch", config="simple")
            | SearchQuery(q, search_type="websearch", config="english"))


def _facet_filters(query: CatalogQuery, skip: str | None = None) -> Q:
    """The facet filters of `query`, all but `skip` (facet counts reflect the other active filters)."""
    where = Q()
    if query.verdict and skip != "verdict":
        where &= functools.reduce(operator.or_, (VERDICT_WHERE[v] for v in query.verdict))
    if query.tag and skip != "tag":
        where &= Q(Exists(EnvironmentTag.objects.filter(environment=OuterRef("pk"), tag__in=query.tag)))
    if query.owner and skip != "owner":
        where &= Q(owner__in=query.owner)
    if query.mode and skip != "mode":
        where &= Q(mode__in=query.mode)
    if query.mcp and skip != "mcp" and len(query.mcp) == 1:
        where &= Q(has_mcp=True) if query.mcp[0] == "yes" else ~Q(has_mcp=True)
    if query.stage and skip != "stage":
        where &= Q(runtime_stage__in=query.stage)
    if query.openenv and skip != "openenv":
        where &= Q(openenv_requirement__in=[v if v != "none" else "" for v in query.openenv])
    return where


def _base(query: CatalogQuery) -> QuerySet[Environment]:
    qs = Environment.objects.all()
    if query.status:
        qs = qs.filter(status=query.status)
    if query.source:
        qs = qs.filter(source=query.source)
    return qs


# Relevance, on PostgreSQL: the tier of the best field that answers the whole search. An environment whose
# names answer it (weight A) ranks above one whose description, tags or MCP tools do (weights A and B: the
# stored `summary`, a small vector), above one whose README does; within a tier, the most liked first, then by
# name. Each tier has its own GIN index (migration 0013), and the small summary is cheap to check row by row,
# so a page in this order is read tier by tier, each from its index or along the likes index, and never scores
# every match.
RANK_NAMES, RANK_SUMMARY, RANK_README = 3, 2, 1


Part = Callable[[], QuerySet[Environment]]  # a QuerySet not built yet (building one costs as much as reading it)


def _tiers(qs: QuerySet[Environment], search: SearchQuery, where: Q) -> list[Part]:
    """The full-text matches of `search` that pass `where`, split into the relevance tiers, best first, each
    annotated with `rank` (its tier): disjoint, and together exactly the matches."""
    names_only = Func(F("search__summary"), Value("{a}"), function="ts_filter", output_field=SearchVectorField())
    names, summary = Q(tier_names=search), Q(search__summary=search)

    def tier(match: Q, rank: int) -> Part:
        # tier_names: the expression migration 0013 indexes
        return lambda: qs.alias(tier_names=names_only).filter(match & where).annotate(rank=Value(rank))

    return [tier(names, RANK_NAMES), tier(summary & ~names, RANK_SUMMARY),
            tier(Q(search__vector=search) & ~summary, RANK_README)]


@dataclass(frozen=True)
class Ranked:
    """A search's matches in relevance order, for paging: the part of the QuerySet API that paging uses
    (`filter`, `order_by`, `values_list`, slicing), applied to each tier. The tiers are disjoint and every match
    of one ranks above every match of the next, so a slice reads them in turn, each cut to what the slice still
    lacks, and stops as soon as it is full: a page costs what its own rows cost, and a search whose best tiers
    fill the page never builds, plans or reads the others. `fallback` is read only when no tier answered."""

    parts: list[Part]
    fallback: Part
    ordering: tuple = ()
    fields: tuple = ("pk",)
    flat: bool = False

    def filter(self, *args, **kwargs) -> Ranked:
        def filtered(part: Part) -> Part:
            return lambda: part().filter(*args, **kwargs)

        return replace(self, parts=[filtered(p) for p in self.parts], fallback=filtered(self.fallback))

    def order_by(self, *ordering) -> Ranked:
        return replace(self, ordering=ordering)

    def values_list(self, *fields, flat: bool = False) -> Ranked:
        return replace(self, fields=fields, flat=flat)

    def _read(self, part: Part, limit: int) -> list:
        return list(part().order_by(*self.ordering).values_list(*self.fields, flat=self.flat)[:limit])

    def __getitem__(self, index: slice) -> list:
        if not isinstance(index, slice) or index.stop is None:
            raise TypeError("a ranked search is read a page at a time: slice it with an end")
        rows: list = []
        for part in self.parts:
            if len(rows) >= index.stop:
                break
            rows += self._read(part, index.stop - len(rows))
        if not rows and index.stop > 0:
            rows = self._read(self.fallback, index.stop)
        return rows[index]


def _full_text(qs: QuerySet[Environment], q: str) -> SearchQuery | None:
    """PostgreSQL: the full-text query of `q` when it matches something in `qs`; else None (SQLite, no search,
    or nothing matches and the typo-tolerant trigram search applies)."""
    if not q or not _postgres():
        return None
    search = _search_query(q)
    return search if qs.filter(search__vector=search).exists() else None


def _searched(qs: QuerySet[Environment], q: str) -> QuerySet[Environment]:
    return _matched(qs, q, _full_text(qs, q))


def _matched(qs: QuerySet[Environment], q: str, search: SearchQuery | None) -> QuerySet[Environment]:
    """Environments matching the search text, annotated with `rank` (higher is better); `search` is what
    `_full_text` found for it.

    PostgreSQL: the stored search vector (names weigh most, then description, tags and MCP tools, then the
    README), ranked by `_tiers` (`rank` here is only a placeholder: `catalog_filtered` hands out a `Ranked` for
    the relevance order); when that finds nothing, trigram similarity to the names, so that a typo still finds
    (`chss` finds chess_env). SQLite: plain contains over the same fields, names first.
    """
    if not q:
        return qs.annotate(rank=Value(0.0))
    if _postgres():
        if search is not None:
            return qs.filter(search__vector=search).annotate(rank=Value(0.0))
        # double precision, not word_similarity's real: a cursor carries the rank through JSON as a Python float,
        # and a real compared with it again is never equal to it.
        similarity = Cast(Greatest(TrigramWordSimilarity(q, "key"), TrigramWordSimilarity(q, "head__manifest_name")),
                          FloatField())
        return qs.annotate(rank=similarity).filter(rank__gte=0.3)
    in_name = Q(key__icontains=q) | Q(head__manifest_name__icontains=q)
    elsewhere = (Q(head__description__icontains=q) | Q(mcp_tools__icontains=q) | Q(head__readme_body__icontains=q)
                 | Q(Exists(EnvironmentTag.objects.filter(environment=OuterRef("pk"), tag__icontains=q))))
    return qs.filter(in_name | elsewhere).annotate(rank=Case(When(in_name, then=Value(1.0)), default=Value(0.5)))


_ORDER = {
    "relevance": ("-rank", "-likes", "key"),
    "updated": ("-updated_at", "key"),
    "likes": ("-likes", "key"),
    "latency": (F("step_p50_ms").asc(nulls_last=True), "key"),
    "validated": (F("validated_at").desc(nulls_last=True), "key"),
    "name": ("key",),
}


def catalog_filtered(query: CatalogQuery, *, order: str | None = None) -> QuerySet[Environment] | Ranked:
    """The environments in one catalog state, unordered, annotated with `rank` (the API orders and pages them).
    In the `relevance` order, a full-text search is a `Ranked`, read tier by tier."""
    base = _base(query)
    if query.q and order == "relevance" and _postgres():
        # The typo fallback answers only when full text matches nothing: it is asked only when no tier answered
        # the slice, and checks that itself (a cursor may have passed every full-text match).
        search, where = _search_query(query.q), _facet_filters(query)

        def typos() -> QuerySet[Environment]:
            return _matched(base, query.q, None).filter(~Exists(base.filter(search__vector=search)) & where)

        return Ranked(_tiers(base, search, where), typos)
    return _matched(base, query.q, _full_text(base, query.q)).filter(_facet_filters(query))


def catalog_matches(query: CatalogQuery) -> QuerySet[Environment] | Ranked:
    """The ids of the environments in one catalog state, in its order: cheap to slice."""
    sort = query.effective_sort
    return catalog_filtered(query, order=sort).order_by(*_ORDER[sort]).values_list("pk", flat=True)


def tag_counts() -> QuerySet:
    """Tags of active environments with how many carry each, most used first: rows of {tag, count}."""
    return (EnvironmentTag.objects.filter(environment__status=Environment.Status.ACTIVE).values("tag")
            .annotate(count=Count("environment_id")).order_by("-count", "tag"))


def owner_counts() -> QuerySet:
    """Owners of active environments with how many each has, most first: rows of {owner, count}."""
    return (Environment.objects.filter(status=Environment.Status.ACTIVE).values("owner")
            .annotate(count=Count("pk")).order_by("-count", "owner"))


def environment_cards(ids: list[int]) -> list[Environment]:
    """The environments with these ids, in this order, with what a card shows loaded (three queries; a fourth
    when one of them is deprecated for a successor)."""
    found = _cards(Environment.objects.filter(pk__in=ids)).prefetch_related(_open_problems()).in_bulk()
    cards = [found[pk] for pk in ids if pk in found]
    _name_successors(cards)
    return cards


class _Counted:
    """A catalog state's ordered matches whose number is already known: the paginator slices, never counts."""

    def __init__(self, matches: QuerySet, count: int):
        self.matches, self._count = matches, count

    def count(self) -> int:
        return self._count

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index):
        return self.matches[index]


def catalog_count(query: CatalogQuery) -> int:
    """How many environments a catalog state holds, from its (cached) facet counts: every environment has
    exactly one verdict, so the verdict facet's counts, for the selected verdicts, add up to the total."""
    counts = dict(_facet_counts_cached(query)["verdict"])
    return sum(n for value, n in counts.items() if not query.verdict or value in query.verdict)


def catalog_page(query: CatalogQuery, number, *, per_page: int) -> Page:
    """One page of a catalog state: the matches are sliced on the environment table alone and counted from the
    facet counts the page shows anyway, then only that page's environments are loaded whole, so a page costs the
    same at ten or a hundred thousand."""
    page = Paginator(_Counted(catalog_matches(query), catalog_count(query)), per_page).get_page(number)
    page.object_list = environment_cards(list(page.object_list))
    return page


@dataclass
class FacetValue:
    value: str
    label: str
    count: int
    selected: bool


@dataclass
class Facet:
    name: str
    label: str
    values: list[FacetValue] = field(default_factory=list)


# The value each facet groups by (the tag facet is the EnvironmentTag rows, counted apart).
_FACET_VALUES = {
    "verdict": VERDICT_FACET, "owner": F("owner"), "mode": F("mode"),
    "mcp": Case(When(has_mcp=True, then=Value("yes")), default=Value("no")),
    "stage": F("runtime_stage"), "openenv": F("openenv_requirement"),
}
_FACET_VALUE_LABELS = {
    "verdict": VERDICTS, "mode": {**MODES, "none": "not known yet"},
    "mcp": {"yes": "Has MCP tools", "no": "No MCP tools"}, "stage": {"none": "no Space (local)"},
    "openenv": {"none": "not declared"},
}


def _facet_counts_postgres(query: CatalogQuery, searched: QuerySet) -> dict[str, list[tuple[str | None, int]]]:
    """Every facet's top values and counts in one round trip: facets whose own filter is not active share one
    filtered set, counted with GROUPING SETS; each facet with an active filter gets the set without it."""
    groups: dict[str | None, list[str]] = {}
    for name in FACETS:
        groups.setdefault(name if getattr(query, name) else None, []).append(name)
    parts, params = [], []
    for skip, names in groups.items():
        scalar = [n for n in names if n != "tag"]
        matching = searched.filter(_facet_filters(query, skip=skip)).order_by()
        sql, sql_params = matching.values(pk_=F("pk"), **{f"f_{n}": _FACET_VALUES[n] for n in scalar}).query.sql_with_params()
        if scalar:
            which = " ".join(f"WHEN GROUPING(f_{n}) = 0 THEN '{n}'" for n in scalar)
            value = " ".join(f"WHEN GROUPING(f_{n}) = 0 THEN f_{n}::text" for n in scalar)
            sets = ", ".join(f"(f_{n})" for n in scalar)
            parts.append(f"SELECT CASE {which} END AS facet, CASE {value} END AS value, COUNT(*) AS n "
                         f"FROM ({sql}) m GROUP BY GROUPING SETS ({sets})")
            params += sql_params
        if "tag" in names:
            parts.append(f"SELECT 'tag' AS facet, t.tag AS value, COUNT(*) AS n FROM registry_environmenttag t "
                         f"WHERE t.environment_id IN (SELECT pk_ FROM ({sql}) m) GROUP BY t.tag")
            params += sql_params
    statement = (f"SELECT facet, value, n FROM (SELECT facet, value, n, row_number() OVER (PARTITION BY facet "
                 f"ORDER BY n DESC, value) AS place FROM ({' UNION ALL '.join(parts)}) u) ranked "
                 f"WHERE place <= %s ORDER BY facet, place")
    counts: dict[str, list[tuple[str | None, int]]] = {name: [] for name in FACETS}
    with connection.cursor() as cursor:
        cursor.execute(statement, [*params, FACET_LIMIT])
        for facet, value, n in cursor.fetchall():
            counts[facet].append((value, n))
    return counts


def _facet_counts_each(query: CatalogQuery, searched: QuerySet) -> dict[str, list[tuple[str | None, int]]]:
    """The same counts one query per facet (SQLite has no GROUPING SETS; it serves small catalogs)."""
    counts = {}
    for name in FACETS:
        matching = searched.filter(_facet_filters(query, skip=name)).order_by()
        if name == "tag":
            rows = (EnvironmentTag.objects.filter(environment__in=matching.values("pk")).values(value=F("tag"))
                    .annotate(n=Count("environment_id")))
        else:
            rows = matching.values(value=_FACET_VALUES[name]).annotate(n=Count("pk"))
        counts[name] = [(r["value"], r["n"]) for r in rows.order_by("-n", "value")[:FACET_LIMIT]]
    return counts


FACET_CACHE_S = 60
CATALOG_VERSION_KEY = "catalog-version"


def catalog_version() -> int:
    """A number that changes whenever what the catalog shows changes (services.catalog bumps it)."""
    return cache.get(CATALOG_VERSION_KEY) or 0


def _facet_counts_cached(query: CatalogQuery) -> dict[str, list[tuple[str | None, int]]]:
    """Facet counts are the dearest part of a catalog page: computed once per catalog state and catalog version,
    kept FACET_CACHE_S at most (a cache that is not shared between processes is stale at most that long)."""
    state = json.dumps([query.as_params(), query.status, query.source, connection.vendor])
    key = f"catalog-facets:{catalog_version()}:{hashlib.sha256(state.encode()).hexdigest()}"
    counts = cache.get(key)
    if counts is None:
        searched = _searched(_base(query), query.q)
        counts = (_facet_counts_postgres if _postgres() else _facet_counts_each)(query, searched)
        cache.set(key, counts, FACET_CACHE_S)
    return counts


def catalog_facets(query: CatalogQuery) -> list[Facet]:
    """Every facet with its values and counts; each facet's counts apply all the other active filters, so
    picking a value never shows a count that would then be wrong. Selected values always appear."""
    counts = _facet_counts_cached(query)
    facets = []
    for name in FACETS:
        labels = _FACET_VALUE_LABELS.get(name, {})
        facet = Facet(name, FACET_LABELS[name])
        selected = set(getattr(query, name))
        for raw, n in counts[name]:
            value = "none" if raw in (None, "") else raw if isinstance(raw, str) else ("yes" if raw else "no")
            facet.values.append(FacetValue(value, labels.get(value, value), n, value in selected))
        seen = {v.value for v in facet.values}
        for value in sorted(selected - seen):  # a selected value with no match still shows, to be unselected
            facet.values.append(FacetValue(value, labels.get(value, value), 0, True))
        facet.values = [v for v in facet.values if v.count or v.selected]
        facets.append(facet)
    return facets


FACET_LABELS = {"verdict": "Verdict", "tag": "Tag", "owner": "Owner", "mode": "Mode", "mcp": "MCP tools",
                "stage": "Runtime stage", "openenv": "OpenEnv requirement"}


def environment_suggestions(*, q: str, limit: int = 5) -> list[Environment]:
    """Close names for a search that found nothing (PostgreSQL: trigram similarity; SQLite: a shared prefix)."""
    if not q:
        return []
    qs = Environment.objects.filter(status=Environment.Status.ACTIVE)
    if _postgres():
        from django.contrib.postgres.search import TrigramSimilarity

        return list(qs.annotate(sim=TrigramSimilarity("key", q)).filter(sim__gt=0.1).order_by("-sim", "key")[:limit])
    return list(qs.filter(Q(name__istartswith=q[:3]) | Q(owner__istartswith=q[:3])).order_by("key")[:limit])


@dataclass
class CatalogHome:
    environments: int
    owners: int
    passing: int
    recently_updated: list[Environment]
    recently_validated: list[Environment]
    most_liked: list[Environment]


def catalog_home(*, per_list: int = 6) -> CatalogHome:
    """The front page: counts and three short lists, a fixed number of queries whatever the catalog's size."""
    active = Environment.objects.filter(status=Environment.Status.ACTIVE)
    counts = active.aggregate(environments=Count("pk"), owners=Count("owner", distinct=True),
                              passing=Count("pk", filter=Q(verdict_outcome="pass")))
    cards = _cards(active)
    return CatalogHome(
        **counts,
        recently_updated=list(cards.order_by("-updated_at", "key")[:per_list]),
        # The same order as the validated sort's index (DESC NULLS LAST), so the newest are read first.
        recently_validated=list(cards.filter(validated_at__isnull=False)
                                .order_by(F("validated_at").desc(nulls_last=True), "key")[:per_list]),
        most_liked=list(cards.filter(likes__gt=0).order_by("-likes", "key")[:per_list]),
    )


# --- one environment ----------------------------------------------------------------------------------------


def environment_get(*, owner: str, name: str) -> Environment | None:
    """One environment by owner/name, case-insensitively, with its head (without README and file list), its
    verdict run and open problems loaded: two queries, whatever the number of revisions or runs (a third when
    it is deprecated for a successor). Its last known good run is read apart, where it is shown
    (`environment_good_run`): joined here, its two tables made the planner's work on this query, which every
    environment endpoint asks, dearer than a query of its own."""
    env = (
        _cards(Environment.objects, manifest=True)
        .prefetch_related(_open_problems())
        .filter(key=environment_key(owner, name))
        .first()
    )
    if env is not None:
        _name_successors([env])
    return env


def environment_good_run(environment: Environment) -> ValidationRun | None:
    """The environment's last known good run with its revision (without README and file list), also set as
    `environment.good_run`; None when no revision ever passed."""
    if environment.good_run_id is None:
        return None
    run = (ValidationRun.objects.select_related("revision").defer("report", "observed", *_heavy("revision"))
           .filter(pk=environment.good_run_id).first())
    if run is not None:
        environment.good_run = run
    return run


def environment_moved(*, owner: str, name: str) -> Environment | None:
    """The environment that moved away from owner/name (case-insensitively), its id only; None when no
    environment ever had that id. Ask only once environment_get found nothing: an id taken again by a new
    Space names that Space, not the one that left it."""
    alias = (EnvironmentAlias.objects.filter(key=environment_key(owner, name)).select_related("environment")
             .only("environment__owner", "environment__name").first())
    return alias.environment if alias else None


def _latest_outcome() -> Subquery:
    """The outcome of a revision's latest finished run, as a column of the revision."""
    latest = (ValidationRun.objects.filter(revision=OuterRef("pk"), state=ValidationRun.State.FINISHED)
              .order_by("-finished_at", "-id"))
    return Subquery(latest.values("outcome")[:1])


def revision_list(*, environment: Environment) -> QuerySet[Revision]:
    """The environment's revisions, newest first, summary columns only, each with the outcome of its latest
    finished run as `latest_outcome` (page or slice it)."""
    return (with_yank(Revision.objects.filter(environment=environment).only(*REVISION_SUMMARY_FIELDS))
            .annotate(latest_outcome=_latest_outcome(), manifest_version=KeyTextTransform("version", "manifest"))
            .order_by("-indexed_at", "-id"))


def with_yank(revisions: QuerySet[Revision]) -> QuerySet[Revision]:
    """Revisions with `yank_reason` and `yanked_at` (None unless their owners yanked them), in the same query."""
    return revisions.annotate(yank_reason=F("yank__reason"), yanked_at=F("yank__yanked_at"))


def environment_history(*, environment: Environment) -> QuerySet[OwnerAction]:
    """What owners, staff and the Hub's webhooks did to the environment, newest first (slice it)."""
    return (OwnerAction.objects.filter(environment=environment).select_related("revision")
            .only("kind", "actor", "via", "detail", "at", "revision__sha").order_by("-at", "-id"))


class AmbiguousRevision(Exception):
    """A sha prefix that more than one revision starts with."""


def revision_resolve(*, environment: Environment | int, ref: str,
                     revisions: QuerySet[Revision] | None = None) -> Revision | None:
    """A revision of the environment (or environment id) by full sha or unique prefix (at least 4 hex
    characters), README included unless `revisions` says what to load; None when nothing matches,
    AmbiguousRevision when several do."""
    ref = ref.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{4,64}", ref):
        return None
    revisions = Revision.objects.defer("files") if revisions is None else revisions
    matches = list(revisions.filter(environment=environment, sha__startswith=ref)[:2])
    if len(matches) > 1:
        raise AmbiguousRevision(ref)
    return matches[0] if matches else None


def environment_tags(environment: Environment) -> list[str]:
    """The tags to show: the head revision's, without placement noise such as region:us."""
    return display_tags(environment.head.tags if environment.head else [])


def sync_run_latest(*, kind: str) -> SyncRun | None:
    """The most recent finished sync of a kind, for the catalog's status line."""
    return SyncRun.objects.filter(kind=kind, state=SyncRun.State.FINISHED).order_by("-finished_at", "-id").first()


def environment_verdict(*, environment: Environment) -> ValidationRun | None:
    """The run whose outcome is the environment's verdict (the head revision's latest, else the latest of any),
    with its report."""
    if environment.verdict_run_id is None:
        return None
    return (ValidationRun.objects.select_related("revision").defer(*_heavy("revision"))
            .filter(pk=environment.verdict_run_id).first())


def revision_run_latest(*, revision: Revision) -> ValidationRun | None:
    """The latest finished run of one revision, with its report and what the server showed."""
    return (ValidationRun.objects.filter(revision=revision, state=ValidationRun.State.FINISHED)
            .select_related("revision").defer(*_heavy("revision")).order_by("-finished_at", "-id").first())


def validation_run_observed(*, run_id: int) -> dict | None:
    """What the server showed in one run (schemas, MCP tools, the episode transcript), or None."""
    return ValidationRun.objects.filter(pk=run_id).values_list("observed", flat=True).first()


def validation_run_live(*, environment: Environment) -> ValidationRun | None:
    """The queued or running validation of the environment's head, if any."""
    return ValidationRun.objects.filter(
        environment=environment, revision_id=environment.head_id, state__in=ValidationRun.LIVE_STATES,
    ).defer("report", "observed").first()


def validation_run_list(*, environment: Environment) -> QuerySet[ValidationRun]:
    """The environment's runs, newest first, without reports (page or slice it)."""
    return (ValidationRun.objects.filter(environment=environment).select_related("revision")
            .defer("report", "observed", *_heavy("revision"), "revision__manifest_raw", "revision__manifest"))


def validation_run_get(*, environment: Environment, run_id: int) -> ValidationRun | None:
    """One run with its report."""
    return (ValidationRun.objects.filter(environment=environment, pk=run_id).select_related("revision")
            .defer(*_heavy("revision")).first())


# Stands for the environment's key in the badge query as compiled, to be told apart from the query's other
# parameters (a JSON path) when it runs; no environment key holds a NUL.
_BADGE_KEY = "\x00"
_MANIFEST_VERSION = KeyTransform("version", "manifest")


@functools.cache
def _badge_query(vendor: str) -> tuple[str, tuple]:
    """The SQL of a badge's query and its parameters, compiled by the ORM once per process and database vendor.

    It finds the environment with the key, else the one that moved away from it (an alias), in one query: the
    badge of an old id stays as cheap as any other.
    """
    # Two uncorrelated scalar subqueries, each an index lookup run once, then a primary-key lookup: an OR of the
    # two conditions would cost PostgreSQL a scan of the whole table.
    named = Environment.objects.filter(key=_BADGE_KEY).order_by().values("pk")[:1]
    moved_from = EnvironmentAlias.objects.filter(key=_BADGE_KEY).order_by().values("environment_id")[:1]
    rows = (Environment.objects.filter(pk=Coalesce(Subquery(named), Subquery(moved_from))).order_by()
            .values_list("verdict_outcome", "runtime_stage", "head_id", "head__sha",
                         KeyTransform("version", "head__manifest"), "pk", "key", "owner", "name", "deprecated_at",
                         "head__yank__yanked_at")[:1])
    return rows.query.sql_with_params()


@dataclass(frozen=True)
class BadgeMoved:
    """A badge asked for under an id its environment moved away from on the Hub: where the environment is now."""

    owner: str
    name: str


# Badge subjects remembered by each process, per catalog version (which every change a badge shows bumps):
# a popular badge costs no query. BADGE_MEMO_S bounds how long one is kept, which is how stale it can be when
# the version is not shared between processes (no Redis: each process has its own). The version itself is
# read at most every BADGE_VERSION_S (a Redis round trip costs more than the rest of a remembered badge).
BADGE_MEMO_S = 10.0
BADGE_VERSION_S = 1.0
BADGE_MEMO_SIZE = 10_000
_badge_memo: OrderedDict[tuple, tuple[float, badges.Subject | BadgeMoved | None]] = OrderedDict()
_badge_version: list = [0.0, 0]  # [read again after (monotonic), version]


def environment_badge_subject(*, owner: str, name: str, revision: str = "") -> badges.Subject | BadgeMoved | None:
    """environment_badge_subject_read, remembered for a few seconds within the catalog version it was read in."""
    now = time.monotonic()
    if now >= _badge_version[0]:
        _badge_version[:] = [now + BADGE_VERSION_S, catalog_version()]
    key = (_badge_version[1], environment_key(owner, name), revision)
    hit = _badge_memo.get(key)
    if hit is not None and hit[0] > now:
        return hit[1]
    subject = environment_badge_subject_read(owner=owner, name=name, revision=revision)
    _badge_memo[key] = (now + BADGE_MEMO_S, subject)
    _badge_memo.move_to_end(key)
    while len(_badge_memo) > BADGE_MEMO_SIZE:
        _badge_memo.popitem(last=False)
    return subject


def environment_badge_subject_read(*, owner: str, name: str,
                                   revision: str = "") -> badges.Subject | BadgeMoved | None:
    """What a status badge says about an environment (its verdict and head), or with `revision` (a sha or unique
    prefix) about that revision (its latest finished run and manifest); None when there is no such environment
    or revision, or the prefix is ambiguous; BadgeMoved when the environment moved away from owner/name.

    Badges are fetched far more often than pages, by everyone who reads a README that shows one, and must cost
    little more than a bare view: one query reading a few columns of the environment and its head (of the
    manifest, only the `version` the database extracts), whose SQL the ORM compiles once (building and compiling
    a query costs several times what running this one does); one more query for `revision`.
    """
    sql, params = _badge_query(connection.vendor)
    key = environment_key(owner, name)
    with connection.cursor() as cursor:
        cursor.execute(sql, [key if p == _BADGE_KEY else p for p in params])
        row = cursor.fetchone()
    if row is None:
        return None
    outcome, stage, head_id, sha, version, pk, found_key, found_owner, found_name, deprecated_at, head_yanked_at = row
    if found_key != key:
        return BadgeMoved(found_owner, found_name)
    asleep, deprecated = stage in SLEEPING_STAGES, deprecated_at is not None
    if not revision:
        # Read as the ORM reads a JSON key (SQLite hands numbers over as numbers, the rest as JSON text).
        version = Revision._meta.get_field("manifest").from_db_value(version, _MANIFEST_VERSION, connection)
        return badges.Subject(outcome=outcome, sleeping=asleep, version=version, sha=sha or "",
                              yanked=head_yanked_at is not None, deprecated=deprecated)
    try:
        found = revision_resolve(
            environment=pk, ref=revision,
            revisions=Revision.objects.only("pk", "sha").annotate(
                latest_outcome=_latest_outcome(), manifest_version=_MANIFEST_VERSION, yanked_at=F("yank__yanked_at")))
    except AmbiguousRevision:
        return None
    if found is None:
        return None
    # The Space serves only the head: whether it sleeps says nothing about an older revision.
    return badges.Subject(outcome=found.latest_outcome or "", sleeping=asleep and found.pk == head_id,
                          version=found.manifest_version, sha=found.sha, yanked=found.yanked_at is not None,
                          deprecated=deprecated)


# --- the discovery catalog ----------------------------------------------------------------------------------


def catalog_snapshot(*, publisher: str, catalog_url: str, site_url: str, hub: str) -> dict:
    """The index as a discovery catalog snapshot (registry.discovery): every active environment with its head, the
    licence its README declares, its manifest's spec_version and its verdict, read in one query; withdrawn ones are
    not in it. Never reads a README or a file list."""
    rows = (Environment.objects.filter(status=Environment.Status.ACTIVE)
            .select_related("head", "verdict_run__revision")
            .only("owner", "name", "source", "verdict_outcome", "validated_at", "mcp_tools", "catalog_entry",
                  "source_revision", "head__sha", "head__manifest_name", "head__description", "head__tags",
                  "head__openenv_requirement", "head__host", "head__subdomain", "head__space_id",
                  "verdict_run__revision__sha")
            .annotate(readme_license=KeyTransform("license", "head__readme_front_matter"),
                      spec_version=KeyTransform("spec_version", "head__manifest"))
            .order_by("key"))
    environments = []
    for env in rows:
        head, run = env.head, env.verdict_run
        # A head read before the Space moved on the Hub names the old host: the pull forms derive the new one.
        moved = bool(head and head.space_id and env.source == Environment.Source.HUGGINGFACE
                     and head.space_id.lower() != env.repo_id.lower())
        environments.append(discovery.CatalogEnvironment(
            owner=env.owner, name=env.name, source=env.source,
            revision=env.source_revision if env.source == Environment.Source.CATALOG else head.sha if head else "",
            display_name=head.manifest_name if head else "", description=head.description if head else "",
            tags=tuple(display_tags(head.tags if head else [])), license=env.readme_license,
            spec_version=env.spec_version, openenv_requirement=head.openenv_requirement if head else "",
            host=head.host if head and not moved else "", subdomain=head.subdomain if head and not moved else "",
            page_url=site_url + reverse("registry:environment", kwargs={"owner": env.owner, "name": env.name}),
            verdict={"outcome": env.verdict_outcome, "revision": run.revision.sha,
                     "finished_at": env.validated_at.isoformat()} if run else None,
            mcp_tools=tuple(t for t in env.mcp_tools or [] if isinstance(t, str)), imported=env.catalog_entry,
        ))
    return discovery.build_snapshot(publisher=publisher, catalog_url=catalog_url, environments=environments, hub=hub)


# --- evaluations ------------------------------------------------------------------------------------------


@dataclass
class Leaderboard:
    """An environment's results, best mean first: `rows` shown (stale ones only when asked), each with
    `rank`, `stale` and `tied` (its interval overlaps the leader's); `hidden_stale` counts what is not shown."""

    rows: list
    leader: object | None
    hidden_stale: int
    revisions: list[str]


# A result is stale when head moved to a revision whose validation showed other schemas or gave another verdict
# than the result was measured on. While head has no verdict of its own (the verdict run is an older revision's,
# or there is none), nothing is judged. One rule, in SQL, for every list, page and badge.
EVALUATION_STALE = (
    ~Q(revision_id=F("environment__head_id"))
    & Q(environment__verdict_run__revision_id=F("environment__head_id"))
    & (~Q(schema_digest=F("environment__verdict_run__schema_digest"))
       | ~Q(verdict=F("environment__verdict_run__outcome")))
)


def _with_stale(qs: QuerySet[Evaluation]) -> QuerySet[Evaluation]:
    return qs.annotate(stale=Case(When(EVALUATION_STALE, then=Value(True)), default=Value(False),
                                  output_field=BooleanField()))


def evaluations(*, environment: Environment, provenance: str | None = None, revision: str | None = None,
                agent: str | None = None, include_stale: bool = False, episodes: bool = False) -> Leaderboard:
    """The leaderboard: every result of the environment (at most a thousand), filtered, best mean first."""
    qs = Evaluation.objects.filter(environment=environment).select_related("revision").only(
        *[f.name for f in Evaluation._meta.concrete_fields if episodes or f.name != "episodes"],
        "revision__sha", "revision__environment_id")
    if provenance:
        qs = qs.filter(provenance=provenance)
    if revision:
        qs = qs.filter(revision__sha__startswith=revision.lower())
    if agent:
        qs = qs.filter(agent=agent)
    rows, hidden = [], 0
    for row in _with_stale(qs).order_by("-mean", "created_at", "id")[:1000]:
        if row.stale and not include_stale:
            hidden += 1
            continue
        rows.append(row)
    leader = next((r for r in rows if not r.stale), None)
    for rank, row in enumerate(rows, 1):
        row.rank = rank
        row.tied = bool(leader is not None and row is not leader and row.ci_low is not None
                        and leader.ci_low is not None and row.ci_high >= leader.ci_low and leader.ci_high >= row.ci_low)
    revisions = sorted({r.revision.sha for r in rows})
    return Leaderboard(rows=rows, leader=leader, hidden_stale=hidden, revisions=revisions)


def evaluation_get(*, environment: Environment, evaluation_id: int) -> Evaluation | None:
    return (_with_stale(Evaluation.objects.filter(environment=environment, pk=evaluation_id))
            .select_related("revision", "run").first())


def model_results(*, agent: str) -> list[Evaluation]:
    """One agent's results across environments (active ones), best first, without their episodes."""
    return list(_with_stale(Evaluation.objects.filter(agent=agent, environment__status=Environment.Status.ACTIVE))
                .select_related("environment", "revision").defer("episodes").order_by("-mean", "id")[:500])


def evaluation_best(*, environment: Environment, agent: str | None = None) -> Evaluation | None:
    """What the score badge shows: the given agent's best current result, or the leader (one query)."""
    qs = Evaluation.objects.filter(environment=environment).exclude(EVALUATION_STALE)
    if agent:
        qs = qs.filter(agent=agent)
    return qs.defer("episodes").order_by("-mean", "created_at", "id").first()
