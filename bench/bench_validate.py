"""make bench-validate: a full hub validation beside `openenv validate <url>`, on the same reference server.

Starts examples/envs/echo_env (openenv 0.10.0, from the sandbox's cached venv) on a loopback port, then
alternates N runs of our probe (run_validation) and N runs of the reference CLI against it, and prints
wall times, their ratio, and the hub probe's per-check times. A last section times the local runner's
phases in the sandbox (venv lookup, server start, probe, teardown).

Usage: python -m bench.bench_validate [N]   (default 5)
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from registry import conformance, sandbox
from tests.support.envserver import SANDBOX_CACHE, SANDBOX_PYTHON, EnvServer, openenv_venv

ROOT = Path(__file__).resolve().parents[1]
ECHO = ROOT / "examples" / "envs" / "echo_env"


def inputs(folder: Path) -> dict:
    from registry import manifest as mf

    files = [{"path": p.relative_to(folder).as_posix(), "size": p.stat().st_size}
             for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    _, manifest, _ = mf.parse_manifest((folder / "openenv.yaml").read_bytes())
    _, requirement, _ = mf.parse_pyproject((folder / "pyproject.toml").read_bytes())
    return {"manifest": manifest, "files": files, "openenv_requirement": requirement, "runtime_plan": None}


def hub_probe(base_url: str, config: conformance.ProbeConfig, **kw) -> tuple[float, dict]:
    started = time.perf_counter()
    report = conformance.run_validation(
        conformance.ProbeTarget(base_url, allowed_hosts=("127.0.0.1", "localhost"), **kw),
        source={"sha": "0" * 40, "repo_id": "bench/echo_env", "runner": "bench"}, config=config, **inputs(ECHO))
    return time.perf_counter() - started, report


def reference(openenv_cli: Path, base_url: str) -> tuple[float, int]:
    started = time.perf_counter()
    done = subprocess.run([str(openenv_cli), "validate", base_url, "--json"], capture_output=True, text=True)
    return time.perf_counter() - started, done.returncode


def cli_startup(openenv_cli: Path) -> float:
    started = time.perf_counter()
    subprocess.run([str(openenv_cli), "validate", "--help"], capture_output=True, check=True)
    return time.perf_counter() - started


def fmt(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1000:8.1f} ms  (min {min(values) * 1000:.1f}, max {max(values) * 1000:.1f})"


def main(argv: list[str]) -> None:
    n = int(argv[0]) if argv else 5
    venv = openenv_venv()
    openenv_cli = venv / "bin" / "openenv"
    config = conformance.ProbeConfig(time_to_first_work_budget_s=300)
    print(f"reference server: {ECHO.relative_to(ROOT)} on {venv.name}; {n} runs each, alternating")

    server = EnvServer(ECHO, python=str(venv / "bin" / "python"))
    server.start()
    try:
        server.wait_ready()
        ours, theirs, startup, phases = [], [], [], defaultdict(list)
        verdicts, codes = set(), set()
        for _ in range(n):
            seconds, report = hub_probe(server.base_url, config)
            ours.append(seconds)
            verdicts.add(report["verdict"])
            for result in report["results"]:
                phases[result["check_id"]].append(result["duration_s"])
            seconds, code = reference(openenv_cli, server.base_url)
            theirs.append(seconds)
            codes.add(code)
            startup.append(cli_startup(openenv_cli))
    finally:
        server.stop()

    print(f"\nhub probe (run_validation, {len(phases)} checks, verdicts {sorted(verdicts)}):  {fmt(ours)}")
    print(f"openenv validate <url> (CLI process, exit codes {sorted(codes)}):           {fmt(theirs)}")
    print(f"  of which CLI start-up (`openenv validate --help`):                  {fmt(startup)}")
    print(f"ratio hub / reference, whole runs (medians): {statistics.median(ours) / statistics.median(theirs):.2f}")
    print("\nhub probe, per check (median of the runs):")
    for check_id, values in sorted(phases.items(), key=lambda kv: -statistics.median(kv[1])):
        print(f"  {check_id:36} {statistics.median(values) * 1000:8.1f} ms")

    print("\nlocal runner phases (sandbox):")
    config_sb = sandbox.SandboxConfig(venv_root=SANDBOX_CACHE / "venvs", work_root=SANDBOX_CACHE / "work",
                                      python=SANDBOX_PYTHON)
    t0 = time.perf_counter()
    venv = sandbox.ensure_venv(sandbox.package_requirements(ECHO), config=config_sb)
    t1 = time.perf_counter()
    with sandbox.running_server(ECHO, venv=venv, config=config_sb) as running:
        t2 = time.perf_counter()
        _, report = hub_probe(running.base_url, config, uds=running.uds)
        t3 = time.perf_counter()
    t4 = time.perf_counter()
    print(f"  venv (cached)           {(t1 - t0) * 1000:8.1f} ms")
    print(f"  server start to first answer {(t2 - t1) * 1000:8.1f} ms")
    print(f"  probe over Unix socket  {(t3 - t2) * 1000:8.1f} ms   verdict {report['verdict']}")
    print(f"  teardown                {(t4 - t3) * 1000:8.1f} ms")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main(sys.argv[1:])
