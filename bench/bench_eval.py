"""make bench-eval: episodes per second of the hub's baseline player beside openenv's own client, same episodes.

Starts examples/envs/guess_number and examples/envs/echo_env (openenv 0.10.0, from the sandbox's cached
venv) on loopback ports. For each, one `play_baseline` run (20 seeds x the random and first-valid
policies, 50 steps at most) records the episodes; then N rounds alternate:

- hub, baseline: `play_baseline` end to end (policies drawing actions, recording, digests, and the two
  determinism replays, which count as episodes);
- hub, player: the recorded episodes played again by the conformance episode player (`play_episode`
  with `fixed_actions`), one /ws session each, as the baseline plays them: reset, state, steps;
- openenv, same frames: the same episodes through openenv's `GenericEnvClient` (async, one session per
  episode: connect, reset, state, steps, close), in openenv's interpreter (a subprocess timing itself,
  imports and a warm-up episode excluded);
- openenv, no state: the same without the state frame (how openenv's own clients play);
- openenv, one session: every episode on one connection, reset after reset.

Every player must bring back the same rewards as the recording, or the run stops. Prints episodes per
second for each (median of the rounds) and the ratios hub / openenv (target >= 0.9 against the same
frames; a session per episode is the baseline's choice, see docs/benchmarks.md).

Usage: python -m bench.bench_eval [N]   (default 5)
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from registry.conformance.episode import fixed_actions, play_episode
from registry.conformance.http import ProbeClient
from registry.evaluation.baseline import BaselineResult, play_baseline
from registry.manifest import parse_manifest
from tests.support.envserver import EnvServer, openenv_venv

ROOT = Path(__file__).resolve().parents[1]
ENVS = ("guess_number", "echo_env")
ALLOWED = ("127.0.0.1",)

# Run by openenv's interpreter: plays the episodes given on stdin with openenv's own client, times itself.
REFERENCE = r"""
import asyncio, json, sys, time
from openenv.core.generic_client import GenericEnvClient

plan = json.load(sys.stdin)
URL = plan["url"]


async def episode(env, spec, state):
    result = await env.reset(seed=spec["seed"], episode_id=spec["episode_id"])
    if state:
        await env.state()
    total = 0.0
    for action in spec["actions"]:
        result = await env.step(action)
        total += result.reward or 0.0
        if result.done:
            break
    return total


async def per_session(episodes, state):
    rewards = []
    for spec in episodes:
        async with GenericEnvClient(base_url=URL) as env:
            rewards.append(await episode(env, spec, state))
    return rewards


async def one_session(episodes, state):
    async with GenericEnvClient(base_url=URL) as env:
        return [await episode(env, spec, state) for spec in episodes]


async def main():
    out = {}
    await per_session(plan["episodes"][:1], True)  # warm-up: first connection, lazy imports
    for name, play, state in (("same frames", per_session, True), ("no state", per_session, False),
                              ("one session", one_session, False)):
        started, cpu = time.perf_counter(), time.process_time()
        rewards = await play(plan["episodes"], state)
        out[name] = {"seconds": time.perf_counter() - started, "cpu": time.process_time() - cpu, "rewards": rewards}
    print(json.dumps(out))


asyncio.run(main())
"""


def record(client: ProbeClient, action_schema: dict, manifest: dict) -> BaselineResult:
    return play_baseline(client, action_schema=action_schema, manifest=manifest)


def episodes_of(result: BaselineResult) -> list[dict]:
    return [{"seed": r.seed, "episode_id": r.episode_id, "actions": r.actions, "reward": r.result.reward}
            for r in result.records]


def hub_baseline(client: ProbeClient, action_schema: dict, manifest: dict, expected: list[float]) -> dict[str, Timing]:
    started, cpu = time.perf_counter(), time.process_time()
    result = record(client, action_schema, manifest)
    timing = Timing(time.perf_counter() - started, time.process_time() - cpu, len(result.records) + len(result.replays))
    check([r.result.reward for r in result.records], expected, "hub baseline")
    return {"hub, baseline": timing}


def hub_player(client: ProbeClient, episodes: list[dict]) -> dict[str, Timing]:
    rewards = []
    started, cpu = time.perf_counter(), time.process_time()
    for spec in episodes:
        episode = play_episode(client, fixed_actions(spec["actions"]),
                               reset_data={"seed": spec["seed"], "episode_id": spec["episode_id"]},
                               deadline=time.monotonic() + 30, state_after_step=False)
        rewards.append(sum(e.reply.data.get("reward") or 0.0 for e in episode.observations() if e.op == "step"))
    timing = Timing(time.perf_counter() - started, time.process_time() - cpu, len(episodes))
    check(rewards, [e["reward"] for e in episodes], "hub player")
    return {"hub, player": timing}


def reference(python: str, url: str, episodes: list[dict]) -> dict[str, Timing]:
    plan = {"url": url, "episodes": [{k: e[k] for k in ("seed", "episode_id", "actions")} for e in episodes]}
    done = subprocess.run([python, "-c", REFERENCE], input=json.dumps(plan), capture_output=True, text=True, check=True)
    out = json.loads(done.stdout)
    for name, figures in out.items():
        check(figures["rewards"], [e["reward"] for e in episodes], f"openenv, {name}")
    return {f"openenv, {name}": Timing(f["seconds"], f["cpu"], len(episodes)) for name, f in out.items()}


def check(rewards: list[float], expected: list[float], who: str) -> None:
    if len(rewards) != len(expected) or any(abs(a - b) > 1e-9 for a, b in zip(rewards, expected)):
        raise SystemExit(f"{who} did not play the recorded episodes: rewards {rewards[:5]}… != {expected[:5]}…")


@dataclass
class Timing:
    """One player's run: wall seconds, the client process's CPU seconds, episodes played."""

    seconds: float
    cpu: float
    episodes: int


def bench(name: str, python: str, rounds: int) -> dict[str, float]:
    package = ROOT / "examples" / "envs" / name
    manifest = parse_manifest((package / "openenv.yaml").read_bytes())[1]
    server = EnvServer(package, python=python)
    server.start()
    try:
        server.wait_ready()
        with ProbeClient(server.base_url, allowed_hosts=ALLOWED) as client:
            action_schema = client.request("GET", "/schema", timeout_s=30).json()["action"]
            recorded = record(client, action_schema, manifest)
            episodes = episodes_of(recorded)
            expected = [e["reward"] for e in episodes]
            steps = sum(len(e["actions"]) for e in episodes)
            print(f"\n{name}: {len(episodes)} episodes, {steps} steps "
                  f"({steps / len(episodes):.1f} per episode), {rounds} rounds alternating")
            players = [
                lambda: hub_baseline(client, action_schema, manifest, expected),
                lambda: hub_player(client, episodes),
                lambda: reference(python, server.base_url, episodes),
            ]
            runs: dict[str, list[Timing]] = {}
            for round_ in range(rounds):
                # The order turns each round, so that no player always runs first (or right after another).
                for play in players[round_ % 3:] + players[:round_ % 3]:
                    for label, timing in play().items():
                        runs.setdefault(label, []).append(timing)
    finally:
        server.stop()
    rates = {}
    print(f"  {'player':<22} {'episodes/s':>10}  {'min':>7} {'max':>7}  {'client CPU/episode':>18}")
    for label in sorted(runs, key=lambda k: (not k.startswith("hub"), k)):
        timings = runs[label]
        per_second = sorted(t.episodes / t.seconds for t in timings)
        rates[label] = statistics.median(per_second)
        cpu = statistics.median(t.cpu / t.episodes for t in timings)
        print(f"  {label:<22} {rates[label]:10.1f}  {per_second[0]:7.1f} {per_second[-1]:7.1f}  {cpu * 1000:15.2f} ms"
              f"   ({timings[0].episodes} episodes)")
    for ours in ("hub, baseline", "hub, player"):
        ratios = ", ".join(f"{theirs.removeprefix('openenv, ')} {rates[ours] / rates[theirs]:.2f}"
                           for theirs in rates if theirs.startswith("openenv"))
        print(f"  ratio {ours} / openenv: {ratios}")
    return rates


def main(argv: list[str]) -> None:
    rounds = int(argv[0]) if argv else 5
    venv = openenv_venv()
    python = str(venv / "bin" / "python")
    print(f"reference client: openenv 0.10.0 GenericEnvClient in {venv.name}; servers from the same venv")
    for name in ENVS:
        bench(name, python, rounds)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main(sys.argv[1:])
