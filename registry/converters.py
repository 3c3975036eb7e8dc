"""URL path converters shared by the web pages and the API."""

from django.urls import register_converter


class RepoPartConverter:
    """One part of an environment id (owner or name): anything but '/' and control characters.

    Hub ids use letters, digits, '-', '_' and '.'; local folder names may use more. Control characters
    (NUL above all, which PostgreSQL text cannot hold) never name an environment: such a path is a 404.
    """

    regex = r"[^/\x00-\x1f\x7f]{1,200}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(RepoPartConverter, "part")
