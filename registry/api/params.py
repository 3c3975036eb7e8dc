"""Query parameters of the API, checked strictly: a malformed value is a 400 that names the parameter and what it
accepts. (The web pages read the same parameters leniently; both build the same `CatalogQuery`.)"""

from __future__ import annotations

from django.utils.dateparse import parse_datetime
from rest_framework import serializers

from registry import selectors
from registry.models import ID_PART, Environment

STATUSES = ("active", "withdrawn", "all")


def _choice(name: str, choices) -> serializers.ChoiceField:
    choices = list(choices)
    return serializers.ChoiceField(choices=choices, required=False, error_messages={
        "invalid_choice": f"must be one of {', '.join(choices)}; got {{input!r}}"})


def _many(child) -> serializers.ListField:
    return serializers.ListField(child=child, required=False, max_length=20, allow_empty=True)


class StrictBoolean(serializers.Field):
    """Only `true` or `false`: a typo must not silently flip a switch."""

    def to_internal_value(self, data):
        if data in ("true", "false"):
            return data == "true"
        self.fail("invalid")

    default_error_messages = {"invalid": "must be true or false"}

    def to_representation(self, value):
        return value


class RFC3339(serializers.Field):
    """An RFC 3339 timestamp with its offset, e.g. 2026-12-03T14:00:00Z."""

    default_error_messages = {"invalid": "must be an RFC 3339 timestamp with a time zone, e.g. 2026-12-03T14:00:00Z"}

    def to_internal_value(self, data):
        moment = parse_datetime(data.strip()) if isinstance(data, str) else None
        if moment is None or moment.tzinfo is None:
            self.fail("invalid")
        return moment

    def to_representation(self, value):
        return value.isoformat()


class EnvironmentListParams(serializers.Serializer):
    """GET /api/v1/environments/: the catalog's search, facets and sorts, the change feed, the cursor."""

    q = serializers.CharField(required=False, allow_blank=True, max_length=selectors.MAX_QUERY_CHARS)
    verdict = _many(_choice("verdict", selectors.VERDICTS))
    tag = _many(serializers.RegexField(r"^[^\x00-\x1f]{1,100}$", error_messages={
        "invalid": "must be a tag: 1 to 100 printable characters"}))
    owner = _many(serializers.RegexField(rf"^{ID_PART}$", error_messages={
        "invalid": "must be an owner id: letters, digits, '_', '.', '-'"}))
    mode = _many(_choice("mode", selectors.MODES))
    mcp = _choice("mcp", ("yes", "no"))
    stage = _many(serializers.RegexField(r"^[A-Z_]{1,32}$", error_messages={
        "invalid": "must be a Hub runtime stage such as RUNNING or SLEEPING"}))
    openenv = _many(serializers.RegexField(r"^[^\x00-\x1f]{1,200}$"))
    sort = _choice("sort", selectors.SORTS)
    status = _choice("status", STATUSES)
    source = _choice("source", Environment.Source.values)
    updated_since = RFC3339(required=False)
    include_withdrawn = StrictBoolean(required=False)
    cursor = serializers.CharField(required=False, max_length=2000)
    page_size = serializers.CharField(required=False)  # checked by the pagination, which clamps it

    def to_internal_value(self, data):
        # A blank value is an absent one (`?tag=&q=` from a form left empty).
        if hasattr(data, "lists"):
            cleaned = type(data)(mutable=True)
            for key, values in data.lists():
                kept = [v for v in values if v.strip()]
                if kept:
                    cleaned.setlist(key, kept)
            data = cleaned
        return super().to_internal_value(data)

    def query(self) -> tuple[selectors.CatalogQuery, str]:
        """The catalog state and the order to page it in."""
        data = self.validated_data
        withdrawn = data.get("include_withdrawn", False)
        status = data.get("status") or ("all" if withdrawn else "active")
        query = selectors.CatalogQuery(
            q=data.get("q", "").strip(), verdict=tuple(data.get("verdict", ())), tag=tuple(data.get("tag", ())),
            owner=tuple(data.get("owner", ())), mode=tuple(data.get("mode", ())),
            mcp=(data["mcp"],) if data.get("mcp") else (), stage=tuple(data.get("stage", ())),
            openenv=tuple(data.get("openenv", ())), sort=data.get("sort", ""),
            status=None if status == "all" else status, source=data.get("source"),
        )
        if data.get("updated_since"):
            return query, "changed"  # the feed has one order: by change
        return query, query.sort or ("relevance" if query.q else "name")

