from django.core.management.base import BaseCommand

from registry.services.discovery import CatalogRefused, catalog_import, catalog_read


class Command(BaseCommand):
    help = ("Import an OpenEnv discovery catalog snapshot from a file or an http(s) URL: all of it, or nothing when "
            "it fails its schema, its digest or is not complete (exit status 1, and why).")

    def add_arguments(self, parser):
        parser.add_argument("location", metavar="FILE_OR_URL")

    def handle(self, *args, location: str, **options):
        try:
            result = catalog_import(data=catalog_read(location=location))
        except CatalogRefused as exc:
            self.stderr.write(f"Not imported: {exc}")
            raise SystemExit(1) from None
        self.stdout.write(f"{location}: {result.line()}")
        for message in result.skipped + result.unpinned:
            self.stderr.write(f"  {message}")
