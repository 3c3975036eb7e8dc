"""make bench-push: from a push's webhook delivery to the revision indexed, and to its verdict.

The Hub stand-in (in this process) holds alice/echo_env, whose app runs on a loopback port (examples/envs/
echo_env, openenv 0.10.0 from the sandbox's cached venv), as a running Space. The hub runs as in production:
gunicorn serving the webhook endpoint, one Celery worker on the default and validation queues, idle between
pushes. Each of N pushes commits a changed README; the stand-in delivers the Hub's webhook; the times come from
the database: the delivery's receipt, the revision's `indexed_at`, the validation run's `finished_at`.

Beside it, in the same run: the webhook's own answer time (the floor of the path) and `openenv validate <url>`,
the reference CLI, on the same server (what a publisher would otherwise run by hand).

Usage: python -m bench.bench_push [N]   (default 10)
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import ROOT, engine, setup_django

SECRET = "whsec-bench-push"
REPO_ID = "alice/echo_env"
ECHO = ROOT / "examples" / "envs" / "echo_env"


def package_files(i: int) -> dict[str, bytes]:
    files = {p.relative_to(ECHO).as_posix(): p.read_bytes()
             for p in ECHO.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    files["README.md"] = files["README.md"] + f"\n\nPush number {i}.\n".encode()
    return files


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


def main(argv: list[str]) -> int:
    n = int(argv[0]) if argv else 10
    setup_django("openenv_hub_bench_push")  # and DATABASE_URL names it, for the hub's processes too
    from registry.models import Revision, ValidationRun, WebhookDelivery
    from tests.support.envserver import EnvServer, free_port, interpreter, openenv_venv
    from tests.support.hubstub import HubStub

    python, why = interpreter()  # openenv 0.10.0, from the sandbox's cached venv (built on first use)
    if python is None:
        raise SystemExit(f"no Python with openenv to run the Space: {why}")

    var = Path(tempfile.mkdtemp(prefix="bench-push-"))
    port = free_port()
    with HubStub() as stub, EnvServer(ECHO, python=python) as space:
        space.wait_ready()
        stub.put_space(REPO_ID, package_files(0))
        stub.update_space(REPO_ID, host=space.base_url)
        env = {**os.environ, "HF_ENDPOINT": stub.url, "HF_TOKEN": "", "HUB_VAR_DIR": str(var), "HF_CACHE_DIR": str(var / "hf"),
               "HUB_WEBHOOK_SECRET": SECRET, "HUB_VALIDATE_NEW_REVISIONS": "true",
               "HUB_PROBE_ALLOWED_HOSTS": "127.0.0.1", "HUB_LOCAL_SOURCES": "", "DJANGO_SETTINGS_MODULE": "hub.settings"}
        web = subprocess.Popen([sys.executable, "-m", "gunicorn", "hub.wsgi", "--bind", f"127.0.0.1:{port}",
                                "--workers", "1", "--threads", "4", "--log-level", "warning"], cwd=ROOT, env=env)
        worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "hub", "worker", "-Q", "default,validation",
                                   "--concurrency", "2", "--loglevel", "WARNING", "--without-heartbeat",
                                   "--without-mingle", "--without-gossip"], cwd=ROOT, env=env)
        try:
            wait(lambda: _answers(f"http://127.0.0.1:{port}/healthz"), 60, "gunicorn")
            stub.add_webhook(f"http://127.0.0.1:{port}/webhooks/huggingface/", secret=SECRET)
            indexed, verdict, answer = [], [], []
            for i in range(1, n + 1):
                time.sleep(1.0)  # the worker is idle when the push lands
                sha = stub.put_space(REPO_ID, package_files(i))
                delivery = wait(lambda: WebhookDelivery.objects.filter(head_sha=sha).exclude(status="duplicate").first(),
                                60, f"the webhook of push {i}")
                revision = wait(lambda: Revision.objects.filter(sha=sha).first(), 60, f"push {i} indexed")
                run = wait(lambda: ValidationRun.objects.filter(revision=revision, state="finished").first(), 120,
                           f"push {i} validated")
                if run.outcome != "pass":
                    raise RuntimeError(f"push {i}: verdict {run.outcome}: {run.report}")
                indexed.append((revision.indexed_at - delivery.received_at).total_seconds())
                verdict.append((run.finished_at - delivery.received_at).total_seconds())
                answer.append(_delivery_answer_s(port, stub, sha))
                print(f"push {i:>3}: indexed {indexed[-1]:6.2f} s  verdict {verdict[-1]:6.2f} s", flush=True)
        finally:
            for proc in (web, worker):
                proc.terminate()
            for proc in (web, worker):
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        cli = openenv_venv() / "bin" / "openenv"
        reference = []
        for _ in range(3):
            started = time.perf_counter()
            subprocess.run([str(cli), "validate", space.base_url, "--json"], capture_output=True)
            reference.append(time.perf_counter() - started)

    print(f"\ndatabase: {engine()}; python {sys.version.split()[0]}; {n} pushes, one idle worker")
    print(f"{'what':<56} {'p50':>8} {'p90':>8} {'max':>8}")
    for label, samples in (
        ("webhook answered (202, replayed delivery: the floor)", answer),
        ("webhook received -> revision indexed", indexed),
        ("webhook received -> verdict (validation of the Space)", verdict),
        ("reference: `openenv validate <url>` on the same server", reference),
    ):
        print(f"{label:<56} {percentile(samples, 50):>7.2f}s {percentile(samples, 90):>7.2f}s {max(samples):>7.2f}s")
    print(f"median verdict / median reference: {statistics.median(verdict) / statistics.median(reference):.2f}")
    return 0


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code < 500
    except httpx.TransportError:
        return False


def _delivery_answer_s(port: int, stub, sha: str) -> float:
    """Replay the push's delivery as the Hub would and time the hub's answer (a duplicate: acknowledged at once)."""
    sent = next(d for d in reversed(stub.deliveries) if d.payload.get("repo", {}).get("headSha") == sha)
    started = time.perf_counter()
    httpx.post(f"http://127.0.0.1:{port}/webhooks/huggingface/", json=sent.payload,
               headers={"X-Webhook-Secret": SECRET}, timeout=30)
    return time.perf_counter() - started


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
