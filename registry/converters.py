"""URL path converters shared by the web pages and the API."""

from django.urls import register_converter

from registry.models import ID_PART


class RepoPartConverter:
    """One part of an environment id (owner or name), as `registry.models.ID_PART` allows it.

    Anything else (a NUL, which PostgreSQL text cannot hold, a '?', a '%') never names an environment:
    such a path is a 404 before any query runs.
    """

    regex = ID_PART

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(RepoPartConverter, "part")


class TagConverter:
    """A tag as the Hub spells it (`openenv`, `license:mit`): no slash, no control character, at most 100."""

    regex = r"[^/\x00-\x1f\x7f]{1,100}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(TagConverter, "tag")
