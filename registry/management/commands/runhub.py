"""Run the whole hub on the embedded defaults: web server, Celery worker and beat, and a first sync."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError


def _port_taken(host: str, port: str) -> str:
    """One sentence when the address cannot be served (taken, or not an address), else ''; nothing is started."""
    try:
        number = int(port)
    except ValueError:
        return f"PORT must be a number, not {port!r}."
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            # A port left in TIME_WAIT by a hub that just stopped is free to take; a listening one is not.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, number))
    except OSError as exc:
        return (f"Cannot serve on {host}:{number} ({exc.strerror or exc}): is another hub already running there? "
                f"Stop it, or choose another port with `make run PORT=...`.")
    return ""


class Command(BaseCommand):
    help = "Start the web server, a Celery worker and Celery beat side by side (what `make run` does)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", default=os.environ.get("PORT", "8000"))
        parser.add_argument("--no-sync", action="store_true", help="Do not queue a first sync.")

    def handle(self, *args, host: str, port: str, no_sync: bool = False, **options):
        problem = _port_taken(host, port)
        if problem:
            raise CommandError(problem)
        call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        self._keep_private()
        python = sys.executable
        celery = [python, "-m", "celery", "-A", "hub"]
        commands = {
            "worker": celery + ["worker", "--loglevel", "INFO", "--concurrency", "2", "-Q", "default,validation,evaluation",
                                "--hostname", "embedded@%h"],
            "beat": celery + ["beat", "--loglevel", "INFO", "--schedule", str(settings.VAR_DIR / "celerybeat-schedule")],
            "web": [python, "manage.py", "runserver", f"{host}:{port}", "--noreload", "--nostatic"],
        }
        procs: dict[str, subprocess.Popen] = {}
        stopping = False

        def stop(*_):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        try:
            for label, cmd in commands.items():
                procs[label] = subprocess.Popen(cmd, cwd=settings.BASE_DIR)
            if not no_sync:
                from workers.tasks import sync_hub

                sync_hub.delay()
                self.stdout.write("first sync queued")
            self.stdout.write(f"OpenEnv Hub on http://{host}:{port}/ (Ctrl-C to stop)")
            while not stopping:
                for label, proc in procs.items():
                    if proc.poll() is not None:
                        self.stderr.write(f"{label} exited with status {proc.returncode}; stopping")
                        stopping = True
                time.sleep(0.5)
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.terminate()
            deadline = time.monotonic() + 15
            for proc in procs.values():
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()

    @staticmethod
    def _keep_private() -> None:
        """The SQLite files and the broker folder hold sessions and password hashes: only this user may read them.

        The local validation sandbox runs environments as `nobody`, which can read world-readable files.
        """
        db = settings.DATABASES["default"]
        if db["ENGINE"].endswith("sqlite3"):
            for suffix in ("", "-wal", "-shm"):
                path = f"{db['NAME']}{suffix}"
                if os.path.exists(path):
                    os.chmod(path, 0o600)
        if settings.BROKER_DIR.exists():
            os.chmod(settings.BROKER_DIR, 0o700)
