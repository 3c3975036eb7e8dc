"""make bench-index: index N synthetic Spaces from the Hub stand-in and report time, requests and memory.

Usage: python -m bench.bench_index [N ...]   (default: 1000 10000)

BENCH_HUB_LATENCY_MS=50 makes the stand-in answer every request that much later, as a remote Hub would;
HUB_SYNC_CONCURRENCY sets the sync's fan-out (default 8).
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.common import engine, peak_rss_mib, rss_mib, setup_django


def synthetic_files(i: int) -> dict[str, bytes]:
    name = f"env_{i:05d}"
    return {
        "openenv.yaml": f"spec_version: 1\nname: {name}\ntype: space\nruntime: fastapi\napp: server.app:app\nport: 8000\n".encode(),
        "README.md": f"---\ntitle: {name}\nsdk: docker\ntags:\n- openenv\n---\n\n# {name}\n\nSynthetic environment number {i}.\n".encode(),
        "pyproject.toml": f'[project]\nname = "openenv-{name}"\ndependencies = ["openenv-core>=0.2"]\n'.encode(),
        "server/app.py": b"app = None\n",
    }


class StubProcess:
    """The Hub stand-in serving N synthetic Spaces from a child process, as the real Hub serves from elsewhere:
    its CPU and its memory are not the indexer's. Asked for its request counts over a pipe."""

    def __init__(self, n: int, latency_s: float = 0.0) -> None:
        import multiprocessing

        from django.db import connections

        connections.close_all()  # the child must not share the parent's database sockets
        self.conn, child = multiprocessing.Pipe()
        self.proc = multiprocessing.get_context("fork").Process(target=self._serve, args=(n, latency_s, child),
                                                                 daemon=True)
        self.proc.start()
        self.url = self.conn.recv()

    @staticmethod
    def _serve(n: int, latency_s: float, conn) -> None:
        import os

        from tests.support.hubstub import HubStub

        try:
            stub = HubStub(page_size=100)
            for i in range(n):
                stub.put_space(f"bench/env_{i:05d}", synthetic_files(i), tags=["openenv", "docker"],
                               card_data={"title": f"env_{i:05d}", "sdk": "docker", "tags": ["openenv"]})
            if latency_s:
                stub.inject(lambda request: True, status=None, times=None, delay=latency_s)
            stub.start()
            conn.send(stub.url)
            while (command := conn.recv()) != "stop":
                if command == "reset":
                    stub.reset_requests()
                    conn.send(None)
                else:
                    conn.send(stub.count(*command[1:]))
            stub.stop()
        finally:
            os._exit(0)  # no interpreter teardown in a forked child

    def count(self, kind: str | None = None) -> int:
        self.conn.send(("count", kind))
        return self.conn.recv()

    def reset_requests(self) -> None:
        self.conn.send("reset")
        self.conn.recv()

    def stop(self) -> None:
        self.conn.send("stop")
        self.proc.join(timeout=30)


def run(n: int) -> dict:
    from django.conf import settings

    from registry import services
    from registry.models import Environment, IndexProblem, Revision, SyncRun

    for model in (IndexProblem,):
        model.objects.all().delete()
    Environment.objects.update(head=None)
    Revision.objects.all().delete()
    Environment.objects.all().delete()
    SyncRun.objects.all().delete()

    stub = StubProcess(n, latency_s=float(os.environ.get("BENCH_HUB_LATENCY_MS") or 0) / 1000)
    try:
        with tempfile.TemporaryDirectory() as cache:
            settings.HF_ENDPOINT = stub.url
            settings.HF_CACHE_DIR = Path(cache)
            gc.collect()
            rss_before = rss_mib()
            t0 = time.perf_counter()
            first = services.hub_sync().run
            first_s = time.perf_counter() - t0
            first_requests = stub.count()
            peak_growth = peak_rss_mib() - rss_before
            assert first.new == n and first.errors == 0, str(first.__dict__)

            stub.reset_requests()
            t0 = time.perf_counter()
            second = services.hub_sync().run
            second_s = time.perf_counter() - t0
            second_requests = stub.count()
            assert second.unchanged == n and second.new == 0
            downloads = stub.count("resolve")
    finally:
        stub.stop()
    return {
        "n": n, "first_s": first_s, "first_req_per_env": first_requests / n,
        "second_s": second_s, "second_req_per_env": second_requests / n, "second_downloads": downloads,
        "peak_rss_growth_mib": peak_growth,
    }


def main(argv: list[str]) -> None:
    sizes = [int(a) for a in argv] or [1000, 10000]
    setup_django("openenv_hub_bench")
    from django.conf import settings

    print(f"database: {engine()}; python {sys.version.split()[0]}; HUB_SYNC_CONCURRENCY={settings.HUB_SYNC_CONCURRENCY}; "
          f"the stand-in serves from a child process, {os.environ.get('BENCH_HUB_LATENCY_MS') or 0} ms late")
    print(f"{'N':>7} {'first sync':>11} {'req/env':>8} {'no-op sync':>11} {'req/env':>8} {'downloads':>9} {'peak RSS +':>11}")
    for n in sizes:
        r = run(n)
        print(f"{r['n']:>7} {r['first_s']:>10.1f}s {r['first_req_per_env']:>8.2f} {r['second_s']:>10.1f}s "
              f"{r['second_req_per_env']:>8.3f} {r['second_downloads']:>9} {r['peak_rss_growth_mib']:>8.0f} MiB")


if __name__ == "__main__":
    main(sys.argv[1:])
