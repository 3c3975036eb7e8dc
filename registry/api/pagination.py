"""Paging the API: page numbers for short lists, a keyset cursor for the environments.

A malformed `page`, `page_size` or `cursor` is a 400 naming the parameter and what it accepts; a `page_size`
above the cap is served at the cap and says so in `X-Page-Size-Clamped`.

The environments are paged by a cursor that holds the last row's sort values and its key: each page asks for
the rows after that one, so an environment inserted or changed meanwhile never makes another one vanish or
repeat. With the name order (the default without a search) and the change feed (`updated_since`, ordered by
`changed_at`), no environment that existed when paging began is lost or repeated, whatever changes meanwhile.
Orders by a value that changes (likes, latency, recency) are stable between changes of that value.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime

from django.db.models import F, Q, QuerySet
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import BasePagination, PageNumberPagination
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

MAX_PAGE_SIZE = 200
DEFAULT_PAGE_SIZE = 50


def page_size_of(request, default: int = DEFAULT_PAGE_SIZE) -> int:
    """`page_size` from the query, checked: a whole number from 1; above MAX_PAGE_SIZE it is clamped (noted)."""
    raw = request.query_params.get("page_size")
    if raw is None or raw == "":
        return default
    try:
        size = int(raw)
    except ValueError:
        size = 0
    if size < 1 or not raw.strip().isdigit():
        raise ValidationError({"page_size": [f"must be a whole number from 1 to {MAX_PAGE_SIZE} "
                                             f"(larger values are served at {MAX_PAGE_SIZE})"]})
    if size > MAX_PAGE_SIZE:
        request.page_size_clamped = (size, MAX_PAGE_SIZE)
        return MAX_PAGE_SIZE
    return size


def clamped_header(request, response) -> None:
    clamped = getattr(request, "page_size_clamped", None)
    if clamped:
        response["X-Page-Size-Clamped"] = f"{clamped[0]} -> {clamped[1]}"


class Pagination(PageNumberPagination):
    """{"count", "next", "previous", "results"} for the short lists (revisions, runs, tags, owners)."""

    page_size = DEFAULT_PAGE_SIZE
    max_page_size = MAX_PAGE_SIZE

    def get_page_size(self, request):
        return page_size_of(request, self.page_size)

    def paginate_queryset(self, queryset, request, view=None):
        raw = request.query_params.get(self.page_query_param)
        if raw is not None and (not raw.isdigit() or int(raw) < 1):
            raise ValidationError({"page": ["must be a whole number from 1"]})
        self.request = request
        page_size = self.get_page_size(request)
        paginator = self.django_paginator_class(queryset, page_size)
        number = int(raw) if raw else 1
        if number > paginator.num_pages:
            raise ValidationError({"page": [f"must be a whole number from 1 to {paginator.num_pages} "
                                            f"(there are {paginator.count} items)"]})
        self.page = paginator.page(number)
        return list(self.page)

    def get_paginated_response(self, data):
        response = super().get_paginated_response(data)
        clamped_header(self.request, response)
        return response

    def get_paginated_response_schema(self, schema):
        described = super().get_paginated_response_schema(schema)
        described["required"] = ["count", "next", "previous", "results"]
        return described


@dataclass(frozen=True)
class Column:
    field: str
    descending: bool = False
    nullable: bool = False


# The orders the environments list can be paged in: each ends with a unique column, so every row has one place.
ORDERS: dict[str, tuple[Column, ...]] = {
    "name": (Column("key"),),
    "updated": (Column("updated_at", descending=True), Column("key")),
    "likes": (Column("likes", descending=True), Column("key")),
    "latency": (Column("step_p50_ms", nullable=True), Column("key")),
    "validated": (Column("validated_at", descending=True, nullable=True), Column("key")),
    "relevance": (Column("rank", descending=True), Column("likes", descending=True), Column("key")),
    "changed": (Column("changed_at"), Column("id")),
}


def _order_by(columns: tuple[Column, ...]) -> list:
    """NULLS LAST only where a column has nulls: on the others the plain order is the one their index holds."""
    return [F(c.field).desc(nulls_last=c.nullable or None) if c.descending
            else F(c.field).asc(nulls_last=c.nullable or None) for c in columns]


def _after(columns: tuple[Column, ...], values: list) -> Q:
    """Rows that come after the row whose sort values are `values`, in this order (NULLS LAST); the last column
    is unique, so it alone orders rows equal in all the others."""
    column, value = columns[0], values[0]
    beyond = Q(**{f"{column.field}__lt" if column.descending else f"{column.field}__gt": value})
    if len(columns) == 1:
        return beyond
    rest = _after(columns[1:], values[1:])
    if value is None:  # among the nulls, which come last: only the following columns order them
        return Q(**{f"{column.field}__isnull": True}) & rest
    after = beyond | (Q(**{column.field: value}) & rest)
    return after | Q(**{f"{column.field}__isnull": True}) if column.nullable else after


def _encode(order: str, values: list) -> str:
    plain = [v.isoformat() if isinstance(v, datetime) else v for v in values]
    return base64.urlsafe_b64encode(json.dumps([order, plain], separators=(",", ":")).encode()).decode().rstrip("=")


def _decode(cursor: str, order: str) -> list:
    try:
        decoded = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        name, values = decoded
        if not isinstance(name, str) or not isinstance(values, list) or len(values) != len(ORDERS[name]):
            raise ValueError
    except (ValueError, TypeError, KeyError, binascii.Error, UnicodeDecodeError, RecursionError):
        raise ValidationError({"cursor": ["is not a cursor this API gave out: use the `next` link as it is"]}) from None
    if name != order:
        raise ValidationError({"cursor": [f"belongs to the {name!r} order, not {order!r}: keep the other parameters "
                                          "of the request that gave it"]})
    for column, index in zip(ORDERS[name], range(len(values))):
        value = values[index]
        if column.field.endswith("_at") and isinstance(value, str):
            try:
                values[index] = datetime.fromisoformat(value)
            except ValueError:
                raise ValidationError({"cursor": ["is damaged"]}) from None
        elif value is not None and not isinstance(value, (str, int, float)):
            raise ValidationError({"cursor": ["is damaged"]})
    return values


class KeysetPagination(BasePagination):
    """{"next", "results"}: the rows after the cursor's, `page_size` of them, and the link to the following page."""

    def paginate(self, queryset: QuerySet, request, *, order: str) -> list:
        self.request, self.order = request, order
        columns = ORDERS[order]
        size = page_size_of(request)
        cursor = request.query_params.get("cursor")
        if cursor:
            queryset = queryset.filter(_after(columns, _decode(cursor, order)))
        rows = list(queryset.order_by(*_order_by(columns)).values_list(*[c.field for c in columns], "pk")[:size + 1])
        self.has_next = len(rows) > size
        rows = rows[:size]
        self.last = rows[-1][:-1] if rows else None
        return [row[-1] for row in rows]

    def next_link(self) -> str | None:
        if not self.has_next or self.last is None:
            return None
        url = self.request.build_absolute_uri()
        return replace_query_param(url, "cursor", _encode(self.order, list(self.last)))

    def get_paginated_response(self, data):
        response = Response(OrderedDict([("next", self.next_link()), ("results", data)]))
        if response.data["next"]:
            response["Link"] = f'<{response.data["next"]}>; rel="next"'
        clamped_header(self.request, response)
        return response

    def get_paginated_response_schema(self, schema):
        return {"type": "object", "required": ["next", "results"], "properties": {
            "next": {"type": ["string", "null"], "format": "uri",
                     "description": "The following page (absent when this is the last one)."},
            "results": schema,
        }}


def first_page_link(request) -> str:
    return remove_query_param(request.build_absolute_uri(), "cursor")
