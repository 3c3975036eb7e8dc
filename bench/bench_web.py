"""make bench-web: serve N environments with gunicorn on PostgreSQL and time the catalog's pages.

Usage: DATABASE_URL=postgres://... python -m bench.bench_web [N ...]   (default: 1000 10000)

For each N: a fresh database of N environments (a revision each, a second revision for one in ten, a finished
validation run with a report for four in five, tags, about 30 environments per owner, likes, README text),
the catalog summary computed by the hub's own service, then gunicorn (2 workers, this machine's 2 cores)
serves it and one client times sequential requests: a bare Django view rendering a constant template (the
floor of the stack), the home page, browse (no filter, a search, three facets combined), an owner page and
environment pages. p50 and p95 in milliseconds.
"""

from __future__ import annotations

import hashlib
import os
import random
import statistics
import subprocess
import sys
import time

import httpx

from bench.common import ROOT, setup_django

REQUESTS = 200
WORDS = ("chess game board maze grid coding python tests browser web agent reward episode planning memory "
         "search tools calculator math physics robot control trading finance text wordle puzzle sokoban atari "
         "snake julia sql shell kernel cuda vision audio speech dialogue negotiation").split()
TAGS = ["openenv", "games", "coding", "web", "math", "robotics", "finance", "text", "mcp", "simulation", "docker",
        "reinforcement-learning", "agents", "tools", "benchmark"]


def seed(n: int) -> None:
    from django.utils import timezone

    from registry.models import Environment, Revision, ValidationRun
    from registry.services.catalog import catalog_refresh_all

    rng = random.Random(n)
    now = timezone.now()
    owners = max(30, n // 30)  # about 30 environments per owner at every N, so an owner page shows as much
    envs = [Environment(source="huggingface", owner=f"org{rng.randrange(owners):04d}", name=f"env_{i:05d}",
                        key=f"placeholder/{i}", likes=int(rng.paretovariate(1.2)) - 1, runtime_stage=rng.choice(
                            ["RUNNING"] * 8 + ["SLEEPING", "BUILD_ERROR"]), updated_at=now) for i in range(n)]
    for env in envs:
        env.key = f"{env.owner}/{env.name}".lower()
    Environment.objects.bulk_create(envs, batch_size=2000)
    envs = list(Environment.objects.order_by("pk"))
    revisions = []
    for env in envs:
        for r in range(2 if env.pk % 10 == 0 else 1):
            words = " ".join(rng.choice(WORDS) for _ in range(400))
            sha = hashlib.sha1(f"{env.key}/{r}".encode()).hexdigest()
            tags = ["openenv", *rng.sample(TAGS[1:], 3)]
            revisions.append(Revision(
                environment=env, sha=sha, content_digest=sha, manifest_name=env.name,
                description=f"{rng.choice(WORDS).title()} {rng.choice(WORDS)} environment for {rng.choice(WORDS)}.",
                readme_body=f"# {env.name}\n\n{words}\n", tags=tags, openenv_requirement=rng.choice(
                    ["openenv[core]>=0.2.2", "openenv==0.10.0", "openenv-core>=0.2", ""]),
                subdomain=env.key.replace("/", "-").replace("_", "-"),
                host=f"https://{env.key.replace('/', '-').replace('_', '-')}.hf.space",
                manifest={"name": env.name, "app": "server.app:app", "port": 8000},
                manifest_raw=f"name: {env.name}\n"))
    Revision.objects.bulk_create(revisions, batch_size=2000)
    heads = {}
    for revision in Revision.objects.order_by("pk").only("pk", "environment_id"):
        heads[revision.environment_id] = revision.pk
    for env in envs:
        env.head_id = heads[env.pk]
    Environment.objects.bulk_update(envs, ["head"], batch_size=2000)
    runs = []
    for env in envs:
        if rng.random() < 0.8:
            outcome = rng.choice(["pass"] * 6 + ["warn", "fail", "fail", "error"])
            p50 = rng.uniform(0.0005, 0.2)
            report = {"verdict": outcome, "results": [
                {"check_id": "hub.http_mode", "status": "pass", "measured": {"mode": rng.choice(
                    ["simulation", "simulation", "production"])}, "evidence": [], "duration_s": 0.01},
                {"check_id": "hub.mcp_endpoint", "status": "pass", "measured": {"mcp": rng.random() < 0.2},
                 "evidence": [], "duration_s": 0.01},
                {"check_id": "hub.ws_episode", "status": "pass", "measured": {"step_latency_s": {"p50": p50}},
                 "evidence": ["reset + 5 step(s)"], "duration_s": 0.2},
            ]}
            runs.append(ValidationRun(environment=env, revision_id=env.head_id, validator_version="bench",
                                      policy_version="bench", runner="space", trigger="new_revision",
                                      state="finished", outcome=outcome, report=report, started_at=now,
                                      finished_at=now, observed={"schemas": None, "tools": None, "episode": []}))
    ValidationRun.objects.bulk_create(runs, batch_size=2000)
    catalog_refresh_all()
    from django.db import connection

    # What autovacuum does after a bulk load: statistics for the planner, GIN pending lists merged into the
    # indexes (a search would otherwise read a long unmerged list).
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")


def serve(port: int, **extra_env: str) -> subprocess.Popen:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.web_settings", **extra_env}
    subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "hub.wsgi", "--bind", f"127.0.0.1:{port}",
                             "--workers", "2", "--log-level", "warning"], cwd=ROOT, env=env)
    for _ in range(200):
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return proc
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError("gunicorn never answered")


def latencies(client: httpx.Client, paths: list[str], requests: int = REQUESTS) -> list[float]:
    """Milliseconds of `requests` sequential GETs cycling through `paths`, sorted, after warming up (caches,
    connections, READMEs rendered at first view)."""
    for path in paths[:20]:
        assert client.get(path).status_code == 200, path
    samples = []
    for i in range(requests):
        path = paths[i % len(paths)]
        started = time.perf_counter()
        response = client.get(path)
        samples.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (path, response.status_code)
    return sorted(samples)


def percentile(samples: list[float], q: float) -> float:
    return statistics.median(samples) if q == 50 else samples[max(0, round(len(samples) * q / 100) - 1)]


def timed(client: httpx.Client, paths: list[str]) -> tuple[float, float]:
    samples = latencies(client, paths)
    return percentile(samples, 50), percentile(samples, 95)


def run(n: int, port: int) -> dict[str, tuple[float, float]]:
    from registry.models import Environment

    keys = list(Environment.objects.order_by("?").values_list("owner", "name")[:200])
    owner = keys[0][0]
    pages = {
        "floor (bare Django view)": ["/bench/floor/"],
        "home": ["/"],
        "browse, no filter": ["/environments/"],
        "browse, search": [f"/environments/?q={w}" for w in ("chess", "maze", "robot", "trading", "wordle")],
        "browse, three facets": [f"/environments/?verdict=pass&tag={t}&mode=simulation" for t in TAGS[1:6]],
        "owner page": [f"/owners/{owner}/"],
        "environment page": [f"/environments/{o}/{name}/" for o, name in keys],
    }
    proc = serve(port)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            return {label: timed(client, paths) for label, paths in pages.items()}
    finally:
        proc.terminate()
        proc.wait(30)


def main(argv: list[str]) -> int:
    sizes = [int(a) for a in argv] or [1000, 10000]
    if not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        print("bench-web measures PostgreSQL: set DATABASE_URL=postgres://…", file=sys.stderr)
        return 2
    from tests.support.envserver import free_port

    results = {}
    for n in sizes:
        base = os.environ["DATABASE_URL"]
        setup_django("openenv_hub_bench_web")
        t0 = time.perf_counter()
        seed(n)
        print(f"N={n}: seeded in {time.perf_counter() - t0:.0f} s", flush=True)
        from django.db import connections

        connections.close_all()
        results[n] = run(n, free_port())
        connections.close_all()
        os.environ["DATABASE_URL"] = base
    labels = list(next(iter(results.values())))
    print("\n| page | " + " | ".join(f"N={n:,} p50 | N={n:,} p95" for n in sizes) + " |")
    print("|---|" + "---:|" * (2 * len(sizes)))
    for label in labels:
        cells = " | ".join(f"{results[n][label][0]:.1f} ms | {results[n][label][1]:.1f} ms" for n in sizes)
        print(f"| {label} | {cells} |")
    if len(sizes) >= 2:
        small, large = sizes[0], sizes[-1]
        print(f"\ngrowth of p50 from N={small:,} to N={large:,}:")
        for label in labels:
            print(f"  {label}: {results[large][label][0] / results[small][label][0]:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
