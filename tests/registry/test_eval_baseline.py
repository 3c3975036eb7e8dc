"""Hub-run baselines and the semantic checks, against real OpenEnv servers over /ws.

The examples (`echo_env`: never done, reward min(1, len/100); `guess_number`: seeded secret, done on a
hit or after 7 guesses) and two fixtures (`nondeterministic`: ignores its seed; `step_crashes`: every step
is an EXECUTION_ERROR) are started once for the module. The checks' pure parts are also shown on records
built by hand.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from registry.conformance import load_policy, verdict
from registry.conformance.episode import Episode
from registry.conformance.http import ProbeClient
from registry.conformance.report import VALIDATOR_VERSION
from registry.evaluation import baseline
from registry.evaluation.baseline import (
    BaselineResult, EpisodeRecord, StepRecord, play_baseline, policy_rng, semantic_checks,
)
from registry.evaluation.episodes import DONE, FAILED, STEP_BOUND, TIME_BOUND, EpisodeResult
from registry.evaluation.policies import random_policy
from registry.manifest import parse_manifest
from tests.support.envserver import EnvServer, free_port

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "echo_env": ROOT / "examples" / "envs" / "echo_env",
    "guess_number": ROOT / "examples" / "envs" / "guess_number",
    "nondeterministic": ROOT / "tests" / "fixtures" / "envs" / "nondeterministic",
    "step_crashes": ROOT / "tests" / "fixtures" / "envs" / "step_crashes",
}
ALLOWED = ("127.0.0.1",)
ECHO_ACTION = {"additionalProperties": False, "type": "object", "required": ["message"],
               "properties": {"metadata": {"additionalProperties": True, "type": "object"}, "message": {"type": "string"}}}


class Target:
    """One running environment: a client, its /schema action and its manifest."""

    def __init__(self, server: EnvServer):
        self.server = server
        self.client = ProbeClient(server.base_url, allowed_hosts=ALLOWED)
        self.action_schema = self.client.request("GET", "/schema", timeout_s=30).json()["action"]
        self.manifest = parse_manifest((server.package_dir / "openenv.yaml").read_bytes())[1]

    def play(self, **kwargs) -> BaselineResult:
        return play_baseline(self.client, action_schema=self.action_schema, manifest=self.manifest, **kwargs)


@pytest.fixture(scope="module")
def envs(openenv_python):
    started = {name: EnvServer(path, python=openenv_python).start() for name, path in PACKAGES.items()}
    targets = {}
    try:
        for name, server in started.items():
            server.wait_ready()
            targets[name] = Target(server)
        yield targets
    finally:
        for target in targets.values():
            target.client.close()
        for server in started.values():
            server.request_stop()
        for server in started.values():
            server.stop()


@pytest.fixture(scope="module")
def echo(envs) -> BaselineResult:
    return envs["echo_env"].play()


@pytest.fixture(scope="module")
def guess(envs) -> BaselineResult:
    return envs["guess_number"].play()


def by_id(checks) -> dict:
    return {c.check_id: c for c in checks}


def outcome(result: BaselineResult, policy: str) -> list[tuple]:
    return [(e.seed, e.reward, e.steps, e.ended) for e in result.evaluation(policy).episodes]


# --------------------------------------------------------------------------- #
# The baseline against the examples
# --------------------------------------------------------------------------- #


@pytest.mark.integration
def test_a_baseline_plays_20_seeds_per_policy_and_records_who_played(echo):
    assert [e.agent for e in echo.evaluations] == ["random", "first-valid"]
    for evaluation in echo.evaluations:
        assert (evaluation.agent_kind, evaluation.harness) == ("policy", "openenv-hub baseline")
        assert evaluation.harness_version == VALIDATOR_VERSION and evaluation.client_version == baseline.CLIENT_VERSION
        assert [e.seed for e in evaluation.episodes] == list(range(20))
        assert [e.episode_id for e in evaluation.episodes] == [f"openenv-hub-baseline-{evaluation.agent}-{s}" for s in range(20)]
        assert evaluation.notes == []
    assert len(echo.records) == 40 and echo.seeds == list(range(20)) and echo.max_steps == 50


@pytest.mark.integration
def test_echo_episodes_run_to_the_step_bound_with_the_rewards_echo_gives(envs, echo):
    for record in echo.records:
        result = record.result
        assert (result.steps, result.ended, result.failure, result.success) == (50, STEP_BOUND, "", None)
        assert 0 < result.wall_s < 30
        assert len(record.actions) == 50 and record.observations[0].label == "reset"
        # echo's reward is min(1, len(message) / 100): the sum is the policy's own message lengths.
        expected = sum(min(1.0, len(a["message"]) / 100) for a in record.actions)
        assert result.reward == pytest.approx(expected)
    first_valid = echo.evaluation("first-valid").episodes
    assert {e.reward for e in first_valid} == {0.0}  # the empty message, every step
    assert all(e.reward > 0 for e in echo.evaluation("random").episodes)
    # The random policy of seed s is the one a reader can rebuild from policy_rng(s).
    record = echo.records[0]
    policy = random_policy(envs["echo_env"].action_schema, policy_rng(0))
    assert [policy(Episode(reset_data={}, steps_ok=n)) for n in range(50)] == record.actions


@pytest.mark.integration
def test_guess_number_rewards_are_what_its_seeded_secret_and_the_policy_give(envs, guess):
    """guess_number's secret for seed s is Random(s).randint(1, 100); a hit scores 1.0 and ends the episode."""
    schema = envs["guess_number"].action_schema
    for seed in range(20):
        secret = random.Random(seed).randint(1, 100)
        policy = random_policy(schema, policy_rng(seed))
        guesses = [policy(Episode(reset_data={}, steps_ok=n))["guess"] for n in range(7)]
        hit = guesses.index(secret) if secret in guesses else None
        expected_random = (seed, 1.0, hit + 1, DONE) if hit is not None else (seed, 0.0, 7, DONE)
        expected_first = (seed, 1.0, 1, DONE) if secret == 1 else (seed, 0.0, 7, DONE)
        assert outcome(guess, "random")[seed] == expected_random
        assert outcome(guess, "first-valid")[seed] == expected_first
    assert sum(e.reward for e in guess.evaluation("random").episodes) >= 1  # random play finds some secret


@pytest.mark.integration
def test_guess_number_replayed_with_the_same_seeds_gives_the_same_episodes(envs, guess):
    again = envs["guess_number"].play()
    for policy in ("random", "first-valid"):
        assert outcome(again, policy) == outcome(guess, policy)
    assert [[o.digest for o in r.observations] for r in again.records] == [[o.digest for o in r.observations] for r in guess.records]
    assert [r.actions for r in again.records] == [r.actions for r in guess.records]


@pytest.mark.integration
def test_semantic_checks_on_the_examples(echo, guess, envs):
    echo_checks = by_id(semantic_checks(echo, envs["echo_env"].manifest))
    guess_checks = by_id(semantic_checks(guess, envs["guess_number"].manifest))
    assert list(echo_checks) == list(baseline.SEMANTIC_CHECK_IDS)

    determinism = guess_checks["hub.determinism"]
    assert determinism.status == "pass", determinism.evidence
    assert determinism.measured["policy"] == "random" and determinism.measured["seed"] == 0
    assert determinism.measured["replays"] == 2 and determinism.measured["actions_replayed"] == guess.records[0].result.steps
    assert [r.actions for r in guess.replays] == [guess.records[0].actions] * 2
    assert echo_checks["hub.determinism"].status == "pass"
    assert echo_checks["hub.determinism"].measured["actions_replayed"] == 50

    # Rewards move on both: echo's with the message length, guess_number's when a guess hits.
    assert echo_checks["hub.reward_spread"].status == "pass"
    spread = guess_checks["hub.reward_spread"]
    assert spread.status == "pass" and (spread.measured["min"], spread.measured["max"]) == (0.0, 1.0)
    assert spread.measured["per_policy"]["first-valid"]["max"] == 0.0  # guessing 1 never hits for seeds 0..19

    # echo never says done; guess_number always does, within its 7 guesses.
    termination = echo_checks["hub.episode_termination"]
    assert termination.status == "fail" and termination.remediation
    assert "none of the 40 episode(s) ended with done within 50 steps: 40 stopped at the step bound" in termination.evidence[0]
    termination = guess_checks["hub.episode_termination"]
    assert termination.status == "pass"
    assert termination.measured["ended_done"] == 40 and termination.measured["steps_to_done"]["max"] == 7
    assert termination.measured["declared_episode_timeout_s"] == 60.0
    assert "40 of 40 episode(s) ended with done within 50 steps and the declared episode timeout of 60 s" in termination.evidence[0]

    # The results fit the report: the policy knows them, and a failing one only warns.
    policy = load_policy()
    assert verdict(echo_checks.values(), policy) == "warn" and verdict(guess_checks.values(), policy) == "pass"
    for check in [*echo_checks.values(), *guess_checks.values()]:
        assert check.to_dict()["evidence"]


# --------------------------------------------------------------------------- #
# A broken environment
# --------------------------------------------------------------------------- #


@pytest.mark.integration
def test_determinism_fails_on_an_environment_that_ignores_its_seed(envs):
    target = envs["nondeterministic"]
    result = target.play(seeds=range(3), max_steps=5)
    checks = by_id(semantic_checks(result, target.manifest))
    determinism = checks["hub.determinism"]
    assert determinism.status == "fail" and determinism.remediation
    # The reset already differs: its `noise` is an unseeded draw.
    assert determinism.measured["first_difference"]["observation"] == 0
    assert any("differs first at reset" in line and "observation.noise" in line for line in determinism.evidence)
    assert determinism.measured["replays_differing"] == 2
    assert checks["hub.reward_spread"].status == "pass"  # random rewards do move
    assert checks["hub.episode_termination"].status == "fail"
    assert [len(e.episodes) for e in result.evaluations] == [3, 3]
    assert {r.result.ended for r in result.records} == {STEP_BOUND}


@pytest.mark.integration
def test_a_crashing_environment_ends_every_episode_failed_without_raising(envs):
    target = envs["step_crashes"]
    result = target.play(seeds=range(3))
    assert len(result.records) == 6
    for record in result.records:
        assert record.result.ended == FAILED and record.result.steps == 0 and record.result.reward == 0.0
        assert "EXECUTION_ERROR" in record.result.failure and "step 1" in record.result.failure
    checks = by_id(semantic_checks(result, target.manifest))
    assert checks["hub.episode_termination"].status == "skip"
    assert "every one of the 6 episode(s) failed" in checks["hub.episode_termination"].evidence[0]
    assert checks["hub.reward_spread"].status == "skip"
    assert checks["hub.determinism"].status == "pass"  # the reset, replayed, is the same
    assert checks["hub.determinism"].measured["actions_replayed"] == 0


@pytest.mark.integration
def test_no_server_at_all_fails_fast():
    with ProbeClient(f"http://127.0.0.1:{free_port()}", allowed_hosts=ALLOWED) as client:
        started = time.monotonic()
        result = play_baseline(client, action_schema=ECHO_ACTION, manifest=None, seeds=[0, 1])
    assert time.monotonic() - started < 10
    assert [r.result.ended for r in result.records] == [FAILED] * 4
    assert all("WebSocket /ws" in r.result.failure for r in result.records)
    checks = by_id(semantic_checks(result, None))
    assert checks["hub.determinism"].status == "skip" and "got no observation" in checks["hub.determinism"].evidence[0]
    assert result.replays == []


@pytest.mark.integration
def test_the_total_deadline_bounds_the_run_and_says_what_was_not_played(envs):
    target = envs["echo_env"]
    started = time.monotonic()
    result = target.play(total_deadline_s=0.3)
    assert time.monotonic() - started < 0.3 + baseline.FRAME_TIMEOUT_S
    played = len(result.records)
    assert 0 < played < 40
    missing = 40 - played
    notes = [n for e in result.evaluations for n in e.notes]
    assert sum(int(n.split()[0]) for n in notes) == missing
    assert all("not played: the total deadline of 0.3 s passed" in n for n in notes)
    assert result.records[-1].result.ended in (TIME_BOUND, STEP_BOUND)


@pytest.mark.integration
def test_a_short_episode_deadline_ends_episodes_time_bound(envs):
    target = envs["echo_env"]
    result = target.play(seeds=[0], policies=("first-valid",), max_steps=100_000, episode_deadline_s=0.2)
    (record,) = result.records
    assert record.result.ended == TIME_BOUND
    # The deadline is met between two steps, or while waiting for a reply that the deadline then cut short.
    assert record.result.failure.startswith("the episode budget ran out") or "no reply within" in record.result.failure
    assert 0 < record.result.steps < 100_000


@pytest.mark.integration
def test_what_on_progress_raises_propagates(envs):
    calls = []

    class Stop(Exception):
        pass

    def on_progress():
        calls.append(1)
        if len(calls) > 30:
            raise Stop

    with pytest.raises(Stop):
        envs["echo_env"].play(on_progress=on_progress)
    # The session was closed: the single-session server takes the next baseline at once.
    result = envs["echo_env"].play(seeds=[0], max_steps=1)
    assert [r.result.ended for r in result.records] == [STEP_BOUND, STEP_BOUND]


@pytest.mark.integration
def test_an_unsupported_action_schema_plays_no_episode_for_that_policy(envs):
    target = envs["echo_env"]
    result = play_baseline(target.client, action_schema={"type": "string"}, manifest=None, seeds=[0])
    assert result.records == []
    for evaluation in result.evaluations:
        assert evaluation.episodes == [] and "no action can be drawn" in evaluation.notes[0]
    assert [c.status for c in semantic_checks(result, None)] == ["skip", "skip", "skip"]


# --------------------------------------------------------------------------- #
# Without a server
# --------------------------------------------------------------------------- #


def test_arguments_that_make_no_sense_are_refused_before_any_connection():
    client = ProbeClient("http://127.0.0.1:9", allowed_hosts=ALLOWED)
    for kwargs in ({"seeds": [-1]}, {"seeds": ["0"]}, {"policies": ("greedy",)}, {"policies": ()},
                   {"policies": ("random", "random")}, {"max_steps": -1}):
        with pytest.raises(ValueError):
            play_baseline(client, action_schema=ECHO_ACTION, manifest=None, **kwargs)


def step(label: str, reward, digest: str = "d", fields: dict | None = None, done: bool = False) -> StepRecord:
    return StepRecord(label=label, action=None if label == "reset" else {"a": label}, reward=reward, done=done,
                      digest=digest, fields=fields or {"reward": str(reward)})


def record(policy: str, seed: int, rewards: list, ended: str = STEP_BOUND) -> EpisodeRecord:
    observations = [step("reset", None)] + [step(f"step {n}", r) for n, r in enumerate(rewards, 1)]
    result = EpisodeResult(seed=seed, reward=sum(r or 0 for r in rewards), steps=len(rewards), ended=ended)
    return EpisodeRecord(policy=policy, seed=seed, episode_id=f"e{seed}", result=result, observations=observations)


def made(records: list[EpisodeRecord], replays: list[EpisodeRecord] | None = None) -> BaselineResult:
    return BaselineResult(evaluations=[], records=records, seeds=[0, 1], policies=["random", "first-valid"],
                          max_steps=3, episode_deadline_s=30, replayed=records[0] if records else None,
                          replays=replays if replays is not None else [records[0]] * 2 if records else [])


def test_a_reward_that_never_moves_fails_with_its_value():
    manifest = {"name": "x", "validation": {"reward": {"range": [0.0, 1.0]}}}
    check = baseline.check_reward_spread(made([record("random", 0, [0.0, None, 0.0]), record("first-valid", 0, [0.0])]), manifest)
    assert check.status == "fail" and check.measured["null_rewards"] == 1  # null counts 0
    assert check.evidence[0] == "all 4 step reward(s) of 2 episode(s) were 0 (the minimum of the declared range [0, 1])"
    check = baseline.check_reward_spread(made([record("random", 0, [0.5, 0.5])]), None)
    assert check.status == "fail" and "were 0.5 (inside the default range [0, 1])" in check.evidence[0]
    check = baseline.check_reward_spread(made([record("random", 0, [0.0, 0.25])]), None)
    assert check.status == "pass" and check.measured["steps_above_min"] == 1


def test_termination_counts_done_episodes_within_the_declared_timeout():
    quick, slow = record("random", 0, [1.0], ended=DONE), record("random", 1, [1.0], ended=DONE)
    slow.result.wall_s, quick.result.wall_s = 20.0, 0.1
    manifest = {"name": "x", "validation": {"resources": {"episode_timeout_s": 10}}}
    check = baseline.check_episode_termination(made([quick, slow]), manifest)
    assert check.status == "pass" and check.measured["ended_done"] == 1 and check.measured["done_after_declared_timeout"] == 1
    check = baseline.check_episode_termination(made([slow]), manifest)
    assert check.status == "fail" and "1 ended with done after the declared episode timeout of 10 s" in check.evidence
    assert baseline.check_episode_termination(made([]), None).status == "skip"


def test_a_determinism_difference_names_the_step_the_reward_and_the_fields():
    played = record("random", 0, [0.0, 0.0, 1.0])
    replay = record("random", 0, [0.0, 0.0, 0.0])
    replay.observations[3] = step("step 3", 0.0, digest="other", fields={"reward": "0.0", "observation.board": "b2"})
    played.observations[3].fields["observation.board"] = "b1"
    check = baseline.check_determinism(made([played], [played, replay]))
    assert check.status == "fail" and check.measured["first_difference"] == {"observation": 3, "replay": 2}
    assert check.evidence[1] == ('replay 2 differs first at step 3 (action {"a": "step 3"}); reward 1 played, 0 replayed; '
                                 "differing: observation.board, reward")
    short = record("random", 0, [0.0])
    short.result.failure = "step 2: no reply within 15.0 s"
    check = baseline.check_determinism(made([played], [short]))
    assert "the replay stopped after 1 step(s)" in check.evidence[1] and "no reply" in check.evidence[1]
    assert baseline.check_determinism(made([])).status == "skip"


def test_digests_are_canonical():
    assert baseline.digest({"b": 1, "a": [1.0, "é"]}) == baseline.digest({"a": [1.0, "é"], "b": 1})
    assert baseline.digest({"a": 1}) != baseline.digest({"a": 2})
    assert set(baseline.field_digests({"observation": {"x": 1, "y": 2}, "reward": 0, "done": False})) == {
        "observation.x", "observation.y", "reward", "done"}
