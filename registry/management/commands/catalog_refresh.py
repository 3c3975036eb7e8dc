from django.core.management.base import BaseCommand

from registry.services.catalog import catalog_refresh_all


class Command(BaseCommand):
    help = ("Recompute every environment's catalog summary (verdict, last known good, mode, MCP tools, latency, "
            "tags, search vector) from the index: after a deployment that changed how it is derived.")

    def handle(self, *args, **options):
        self.stdout.write(f"refreshed {catalog_refresh_all()} environments")
