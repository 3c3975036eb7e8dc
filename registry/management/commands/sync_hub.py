from django.core.management.base import BaseCommand

from registry import services


class Command(BaseCommand):
    help = ("Reconcile the index with the Hugging Face Hub and the local sources, synchronously, and print a "
            "summary (exit status 1 on errors or an incomplete Hub listing).")

    def add_arguments(self, parser):
        only = parser.add_mutually_exclusive_group()
        only.add_argument("--hub-only", action="store_true", help="Skip the local sources.")
        only.add_argument("--local-only", action="store_true", help="Skip the Hugging Face Hub.")
        parser.add_argument("--enqueue", action="store_true", help="Send the sync to a Celery worker instead.")

    def handle(self, *args, hub_only=False, local_only=False, enqueue=False, **options):
        if enqueue:
            from workers.tasks import sync_hub

            sync_hub.delay()
            self.stdout.write("sync_hub queued")
            return
        failed = False
        if not local_only:
            summary = services.hub_sync()
            self.stdout.write(f"hub ({summary.run.target}): {summary}")
            failed |= summary.skipped or not summary.run.listing_complete or summary.run.errors > 0
            self._messages(summary)
        if not hub_only:
            summary = services.local_sync()
            self.stdout.write(f"local: {summary}")
            failed |= summary.skipped or summary.run.errors > 0
            self._messages(summary)
        if failed:
            raise SystemExit(1)

    def _messages(self, summary) -> None:
        for message in [] if summary.skipped else summary.run.messages:
            self.stderr.write(f"  {message}")
