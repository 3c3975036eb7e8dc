from django.core.management.base import BaseCommand, CommandError

from registry import selectors, services


class Command(BaseCommand):
    help = ("Index one Hugging Face Space (owner/name), or one folder of a local source (its owner/name), "
            "synchronously and print a summary (exit status 1 on errors).")

    def add_arguments(self, parser):
        parser.add_argument("repo_id", help="owner/name")

    def handle(self, *args, repo_id: str, **options):
        if repo_id.count("/") != 1 or not all(repo_id.split("/")):
            raise CommandError(f"expected owner/name, got {repo_id!r}")
        # An id whose owner names a local source is a folder of it, not a Space: index the folder.
        summary = services.local_index_by_id(repo_id=repo_id) or services.space_index_by_id(repo_id=repo_id)
        self.stdout.write(f"{repo_id}: {summary}")
        for message in summary.run.messages:
            self.stderr.write(f"  {message}")
        owner, name = repo_id.split("/")
        env = selectors.environment_get(owner=owner, name=name)
        for problem in env.open_problems if env else []:
            self.stderr.write(f"  {problem.code}: {problem.message}")
        if summary.run.errors:
            raise SystemExit(1)
