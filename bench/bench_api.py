"""make bench-api: serve N environments with gunicorn on PostgreSQL and time the discovery API and the badges.

Usage: DATABASE_URL=postgres://... [REDIS_URL=redis://...] python -m bench.bench_api [N ...]
(default: 1000 10000 100000)

For each N: the database of `make bench-web` (bench.bench_web.seed: N environments, a revision each and a
second for one in ten, finished runs for four in five, tags, owners, likes, README text, the catalog summary
computed by the hub's own service), then gunicorn (2 workers, this machine's 2 cores) serves it.

Latency: one client, sequential requests, p50 and p99 in milliseconds, beside a bare Django view answering a
constant JSON object (the floor of the stack: routing, the hub's middleware, no query). The rate limit runs as
deployed (its counter in REDIS_URL's Redis when set) with a limit too high to be reached.

Throughput: CLIENTS concurrent clients for SECONDS each against the status badge and against a bare view
answering a constant SVG; requests per second and their ratio.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import httpx

from bench import bench_web
from bench.common import setup_django

REQUESTS = 300
CLIENTS = 4
SECONDS = 5.0


def deep_cursor(n: int) -> str:
    """The `next` cursor the API hands out after paging by name to the middle of the catalog."""
    from registry.api.pagination import _encode
    from registry.models import Environment

    key = Environment.objects.order_by("key").values_list("key", flat=True)[n // 2]
    return _encode("name", [key])


def throughput(base_url: str, paths: list[str]) -> float:
    """Requests per second that CLIENTS clients, each on its own keep-alive connection, get answered."""
    done = [0] * CLIENTS
    stop = time.perf_counter() + SECONDS

    def client(i: int) -> None:
        with httpx.Client(base_url=base_url, timeout=30) as http:
            k = 0
            while time.perf_counter() < stop:
                response = http.get(paths[(i + k) % len(paths)])
                assert response.status_code == 200, response.status_code
                k += 1
            done[i] = k

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done) / (time.perf_counter() - started)


def run(n: int, port: int) -> tuple[dict[str, list[float]], dict[str, float]]:
    from registry.models import Environment

    keys = list(Environment.objects.order_by("?").values_list("owner", "name")[:200])
    cursor = deep_cursor(n)
    endpoints = {
        "floor (bare JSON view)": ["/bench/floor.json"],
        "list, first page": ["/api/v1/environments/"],
        "list, deep cursor (middle)": [f"/api/v1/environments/?cursor={cursor}"],
        "list, search": [f"/api/v1/environments/?q={w}" for w in ("chess", "maze", "robot", "trading", "wordle")],
        "list, two filters": [f"/api/v1/environments/?verdict=pass&tag={t}" for t in bench_web.TAGS[1:6]],
        "detail": [f"/api/v1/environments/{o}/{name}/" for o, name in keys],
        "badge (SVG)": [f"/badges/{o}/{name}/conformance.svg" for o, name in keys],
        "floor (bare SVG view)": ["/bench/floor.svg"],
    }
    proc = bench_web.serve(port, HUB_API_RATE_ANONYMOUS=str(10**9))
    base_url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base_url, timeout=30) as client:
            latency = {label: bench_web.latencies(client, paths, REQUESTS) for label, paths in endpoints.items()}
        rates = {"badge (SVG)": throughput(base_url, endpoints["badge (SVG)"]),
                 "floor (bare SVG view)": throughput(base_url, ["/bench/floor.svg"])}
        return latency, rates
    finally:
        proc.terminate()
        proc.wait(30)


def main(argv: list[str]) -> int:
    sizes = [int(a) for a in argv] or [1000, 10000, 100000]
    if not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        print("bench-api measures PostgreSQL: set DATABASE_URL=postgres://…", file=sys.stderr)
        return 2
    print(f"rate-limit counters: {'Redis' if os.environ.get('REDIS_URL') else 'local memory (set REDIS_URL)'}")
    from tests.support.envserver import free_port

    latency, rates = {}, {}
    for n in sizes:
        base = os.environ["DATABASE_URL"]
        setup_django("openenv_hub_bench_api")
        t0 = time.perf_counter()
        bench_web.seed(n)
        print(f"N={n}: seeded in {time.perf_counter() - t0:.0f} s", flush=True)
        from django.db import connections

        connections.close_all()
        latency[n], rates[n] = run(n, free_port())
        connections.close_all()
        os.environ["DATABASE_URL"] = base
    pct = bench_web.percentile
    labels = list(next(iter(latency.values())))
    print("\n| request | " + " | ".join(f"N={n:,} p50 | N={n:,} p99" for n in sizes) + " |")
    print("|---|" + "---:|" * (2 * len(sizes)))
    for label in labels:
        cells = " | ".join(f"{pct(latency[n][label], 50):.1f} ms | {pct(latency[n][label], 99):.1f} ms"
                           for n in sizes)
        print(f"| {label} | {cells} |")
    if len(sizes) >= 2:
        small, large = sizes[0], sizes[-1]
        print(f"\ngrowth of p50 from N={small:,} to N={large:,}:")
        for label in labels:
            print(f"  {label}: {pct(latency[large][label], 50) / pct(latency[small][label], 50):.2f}x")
    print(f"\nthroughput, {CLIENTS} clients for {SECONDS:.0f} s:")
    for n in sizes:
        badge, floor = rates[n]["badge (SVG)"], rates[n]["floor (bare SVG view)"]
        print(f"  N={n:,}: badge {badge:.0f}/s, bare SVG view {floor:.0f}/s, ratio {badge / floor:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
