"""Graders over a recorded /ws episode: pure functions from an `Episode` (and what else they name) to a CheckResult.

They implement the runtime contract of PROTOCOL §1.2 the way `openenv
validate` grades it (§1.5), plus the hub's time to first work. Invariant: no
network and no clock, times come in as arguments; the same inputs give the
same result (the one exception: the observation schema is evaluated in the
schema sandbox, which can run out of the caller's `timeout_s`). The caller
calls each only when the episode has something to grade (a reset
observation, and a step observation for the first three).
"""

from __future__ import annotations

import math

from . import static
from .episode import Episode
from .report import FAIL, PASS, SKIP, CheckResult, clip
from .schema import SchemaWorkerError, evaluate
from .static import is_number


def observation_schema(episode: Episode, schema: dict, *, timeout_s: float) -> CheckResult:
    """runtime.observation_schema: reset and step observations validate against /schema (in the schema sandbox).

    `schema` is the /schema body, with an `observation` object; `timeout_s` bounds the sandboxed evaluation.
    """
    cid = "runtime.observation_schema"
    step_schema = schema["observation"]
    reset_schema = schema.get("reset_observation") or step_schema
    problems, instances = [], {"reset": [], "step": []}
    labels = {"reset": [], "step": []}
    for record in episode.observations():
        data = record.reply.data
        observation = data.get("observation")
        shape = []
        if not isinstance(observation, dict):
            shape.append("observation is not an object")
        if type(data.get("done")) is not bool:
            shape.append(f"done is {clip(data.get('done'), 40)}, not a boolean")
        if "reward" not in data:
            shape.append("reward is missing")
        if shape:
            problems.append(f"{record.label}: {'; '.join(shape)}")
            continue
        # The wire lifts reward and done out of the observation model; put them back.
        instances[record.op].append({**observation, "reward": data.get("reward"), "done": data.get("done")})
        labels[record.op].append(record.label)
    tasks = [{"id": op, "op": "validate", "schema": schema, "instances": instances[op]}
             for op, schema in (("reset", reset_schema), ("step", step_schema)) if instances[op]]
    try:
        outcome = evaluate(tasks, timeout_s=timeout_s)
    except SchemaWorkerError as exc:
        return CheckResult(cid, FAIL, {}, [str(exc)],
                           "Keep the observation schema simple enough to evaluate (no pathological patterns).")
    for task in tasks:
        entry = outcome.get(task["id"], {})
        if entry.get("failed"):
            problems.append(f"the {task['id']} observation schema could not be evaluated: {entry['failed']}")
            continue
        for label, errors in zip(labels[task["id"]], entry.get("results", [])):
            problems += [f"{label}: {error}" for error in errors[:3]]
    measured = {"observations": sum(len(v) for v in instances.values()),
                "reset_schema": "reset_observation" if schema.get("reset_observation") else "observation"}
    if problems:
        return CheckResult(cid, FAIL, measured, problems,
                           "Make reset/step observations match /schema's observation (reset_observation for reset): "
                           "send what the pydantic Observation model declares.")
    return CheckResult(cid, PASS, measured, [f"{measured['observations']} observation(s) valid against /schema"])


def reward_well_formed(episode: Episode, manifest: dict | None) -> CheckResult:
    """runtime.reward_well_formed: every reward is a finite number in the manifest's range (the reset's may be null)."""
    cid = "runtime.reward_well_formed"
    low, high = static.reward_range(manifest)
    declared = static.declared_reward_range(manifest) is not None
    problems, rewards = [], []
    for record in episode.observations():
        data = record.reply.data
        if "reward" not in data:
            problems.append(f"{record.label}: reward is missing")
            continue
        reward = data["reward"]
        rewards.append(reward)
        if reward is None and record.op == "reset":
            continue
        if not is_number(reward) or not math.isfinite(reward):
            problems.append(f"{record.label}: reward {clip(reward, 40)} is not a finite number")
        elif not low <= reward <= high:
            problems.append(f"{record.label}: reward {reward} outside [{low}, {high}]")
    measured = {"range": [low, high], "range_source": "validation.reward.range" if declared else "default",
                "rewards": rewards[:100]}
    if problems:
        return CheckResult(cid, FAIL, measured, problems,
                           f"Return finite rewards within [{low}, {high}], or declare the real range in "
                           "openenv.yaml validation.reward.range.")
    return CheckResult(cid, PASS, measured, [f"{len(rewards)} reward(s) {clip(rewards[:10], 100)} in [{low}, {high}]"])


def state_contract(episode: Episode) -> CheckResult:
    """runtime.state_contract: state keeps the episode_id sent with reset and counts the steps taken."""
    cid = "runtime.state_contract"
    expected_id = episode.reset_data.get("episode_id")
    problems, checked = [], 0
    for record in episode.exchanges:
        if record.op != "state" or record.reply.problem or record.reply.is_error_frame:
            continue
        data = record.reply.data
        if not isinstance(data, dict):
            problems.append(f"{record.label}: state data is not an object")
            continue
        checked += 1
        if data.get("episode_id") != expected_id:
            problems.append(f"{record.label}: episode_id {clip(data.get('episode_id'), 60)}, "
                            f"expected {expected_id!r} (sent with reset)")
        count = data.get("step_count")
        if type(count) is not int or count != record.steps:
            problems.append(f"{record.label}: step_count {clip(count, 30)}, expected {record.steps}")
    measured = {"states": checked, "episode_id": expected_id, "steps": episode.steps_ok}
    if not checked:
        problems.append("no state reply to check")
    if problems:
        return CheckResult(cid, FAIL, measured, problems,
                           "Keep the episode_id passed to reset() in state and increment state.step_count on "
                           "every step().")
    return CheckResult(cid, PASS, measured, [f"{checked} state(s): episode_id {expected_id!r} kept, "
                                             f"step_count counted to {episode.steps_ok}"])


def time_to_first_work(
    *, origin: float, origin_kind: str, healthy_at: float | None, first_reset_at: float | None, budget_s: float,
) -> CheckResult:
    """hub.time_to_first_work: from `origin` (time.monotonic() of `origin_kind`: "process_start" or
    "first_request") to the first reset observation, within `budget_s`; skip without a reset observation."""
    cid = "hub.time_to_first_work"
    measured = {
        "origin": origin_kind,
        "time_to_healthy_s": round(healthy_at - origin, 3) if healthy_at else None,
        "time_to_first_reset_s": round(first_reset_at - origin, 3) if first_reset_at else None,
        "budget_s": budget_s,
    }
    if first_reset_at is None:
        return CheckResult(cid, SKIP, measured, ["unmet dependency: hub.ws_episode (no reset observation)"])
    seconds = first_reset_at - origin
    if seconds > budget_s:
        return CheckResult(cid, FAIL, measured,
                           [f"first reset observation {seconds:.1f} s after {measured['origin'].replace('_', ' ')}, "
                            f"over the {budget_s:.0f} s budget"],
                           "Start faster: defer heavy imports and downloads until they are needed.")
    healthy = f"healthy after {measured['time_to_healthy_s']:.2f} s, " if healthy_at else ""
    return CheckResult(cid, PASS, measured, [f"{healthy}first reset observation after {seconds:.2f} s "
                                             f"(from {measured['origin'].replace('_', ' ')})"])
