"""Hub-run baselines: reference policies played against a running environment, and the semantic checks on them.

`play_baseline` plays every policy (`random`, `first-valid`; see `policies`)
for every seed over `/ws` with the conformance episode player, one fresh
session per episode, and returns a `BaselineResult`: one `PlayedEvaluation`
per policy (the record every evaluation produces), and beside it what the
semantic checks need (per episode the actions sent and, per step, the reward
and a digest of the observation).

The determinism replay is done inside `play_baseline`, right after the
first episode (the first policy's first seed): its recorded actions are
played again twice (`fixed_actions`), each time on a fresh session with the
same reset data. Doing it there keeps `semantic_checks(result, manifest)`
pure (no I/O, no client) and makes the replay happen early, before the time
budget can run out.

Invariants:

- bounded: at most `max_steps` steps per episode; every episode within
  `episode_deadline_s` (lowered to the manifest's declared
  `validation.resources.episode_timeout_s` when that is shorter), every frame
  within FRAME_TIMEOUT_S, and everything, replays included, within
  `total_deadline_s`; episodes the total deadline leaves no time for are not
  played, and the evaluation's notes say how many;
- nothing a server does raises out of `play_baseline`: a session that breaks
  ends its episode as FAILED with the failure as text, a frame that times out
  as FAILED too (TIME_BOUND is kept for the player's own deadlines);
  only what `on_progress` raises propagates (the caller's cancellation);
- deterministic given the seeds: the random policy of seed s draws from
  `random.Random(f"openenv-hub-baseline/{s}")` (not `Random(s)`, which an
  environment seeding its own generator with s would mirror, and so see the
  policy's moves coming).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from registry.conformance.episode import Episode, Policy, Progress, fixed_actions, play_episode
from registry.conformance.http import ProbeClient
from registry.conformance.report import FAIL, PASS, SKIP, VALIDATOR_VERSION, CheckResult, clip
from registry.conformance.static import declared_reward_range, is_number, reward_range, validation_block

from .episodes import DONE, FAILED, STEP_BOUND, TIME_BOUND, EpisodeResult, PlayedEvaluation
from .policies import DEFAULT_MAX_STEPS, UnsupportedSchema, first_valid_policy, random_policy

RANDOM, FIRST_VALID = "random", "first-valid"
POLICIES = (RANDOM, FIRST_VALID)
DEFAULT_SEEDS = tuple(range(20))
DEFAULT_EPISODE_DEADLINE_S = 30.0
DEFAULT_TOTAL_DEADLINE_S = 300.0
FRAME_TIMEOUT_S = 15.0  # one reply; a server silent this long has failed, not run out of the episode's time
REPLAYS = 2
HARNESS = "openenv-hub baseline"
HARNESS_VERSION = VALIDATOR_VERSION
CLIENT_VERSION = "openenv 0.10.0 /ws"  # the protocol the conformance episode player speaks (PROTOCOL §1.2)
AGENT_KIND = "policy"
BUDGET_RAN_OUT = "the episode budget ran out"  # how the player words its own deadline (episode.py)
MAX_FIELD_DIGESTS = 50

SEMANTIC_CHECK_IDS = ("hub.determinism", "hub.reward_spread", "hub.episode_termination")


# --------------------------------------------------------------------------- #
# What is recorded
# --------------------------------------------------------------------------- #


def digest(value: Any) -> str:
    """A short digest of `value` as canonical JSON (sorted keys, no spaces): equal data, equal digest."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def field_digests(data: Any) -> dict[str, str]:
    """Digests of an observation's parts (`observation.<field>`, `reward`, `done`, `metadata`), to name what differs."""
    if not isinstance(data, dict):
        return {"(reply)": digest(data)}
    parts: dict[str, str] = {}
    observation = data.get("observation")
    if isinstance(observation, dict):
        for key in sorted(observation, key=str)[:MAX_FIELD_DIGESTS]:
            parts[f"observation.{key}"] = digest(observation[key])
    elif "observation" in data:
        parts["observation"] = digest(observation)
    for key in sorted((k for k in data if k != "observation"), key=str)[:MAX_FIELD_DIGESTS]:
        parts[str(key)] = digest(data[key])
    return parts


@dataclass
class StepRecord:
    """One observation of an episode: the action that led to it (None for the reset), its reward and digests."""

    label: str  # "reset", "step 1", …
    action: Any
    reward: Any  # as the server sent it (None, a number, anything)
    done: bool
    digest: str
    fields: dict[str, str] = field(default_factory=dict)  # per part, for the episodes a replay compares only

    @property
    def reward_value(self) -> float:
        """The reward as counted: a finite number, else 0 (None and anything else count 0)."""
        return float(self.reward) if is_number(self.reward) and math.isfinite(self.reward) else 0.0


@dataclass
class EpisodeRecord:
    """One episode as played: its result, the actions sent and every observation's reward and digest."""

    policy: str
    seed: int
    episode_id: str
    result: EpisodeResult
    observations: list[StepRecord] = field(default_factory=list)  # the reset's first, then one per step

    @property
    def steps(self) -> list[StepRecord]:
        return [o for o in self.observations if o.label != "reset"]

    @property
    def actions(self) -> list[Any]:
        """The actions the server accepted, in order: what a replay plays again."""
        return [s.action for s in self.steps]


@dataclass
class BaselineResult:
    """What `play_baseline` played: the evaluations, each episode's record, and the determinism replays."""

    evaluations: list[PlayedEvaluation]
    records: list[EpisodeRecord]  # every episode, in the order played (seed by seed, policy by policy)
    seeds: list[int]
    policies: list[str]
    max_steps: int
    episode_deadline_s: float
    replayed: EpisodeRecord | None = None  # the episode replayed for hub.determinism
    replays: list[EpisodeRecord] = field(default_factory=list)
    replay_wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    def evaluation(self, policy: str) -> PlayedEvaluation:
        return next(e for e in self.evaluations if e.agent == policy)


def _success(observations: list[dict]) -> bool | None:
    """The last boolean `success` the environment put in an observation's metadata, if any."""
    for data in reversed(observations):
        inner = data.get("observation") if isinstance(data.get("observation"), dict) else {}
        for metadata in (data.get("metadata"), inner.get("metadata")):
            if isinstance(metadata, dict) and isinstance(metadata.get("success"), bool):
                return metadata["success"]
    return None


def _ending(episode: Episode, deadline: float, max_steps: int, policy_problem: str | None) -> tuple[str, str]:
    """How the episode ended (one of ENDINGS) and the failure text (empty unless FAILED or TIME_BOUND)."""
    if episode.failure:
        if episode.failure.startswith(BUDGET_RAN_OUT) or time.monotonic() >= deadline:
            return TIME_BOUND, episode.failure
        return FAILED, episode.failure
    if episode.done:
        return DONE, ""
    if policy_problem:
        return FAILED, policy_problem
    if episode.steps_ok >= max_steps:
        return STEP_BOUND, ""
    return FAILED, f"the episode stopped after {episode.steps_ok} step(s) without done or failure"


def episode_record(
    episode: Episode, *, policy: str, seed: int, episode_id: str, deadline: float, max_steps: int,
    wall_s: float, policy_problem: str | None = None, detailed: bool = False,
) -> EpisodeRecord:
    """Turn a played `Episode` into its record: the EpisodeResult and the per-observation digests
    (`detailed`: with the digest of each part too, to name what differs; kept for the replayed episodes)."""
    observations: list[StepRecord] = []
    datas: list[dict] = []
    for exchange in episode.observations():
        data = exchange.reply.data
        datas.append(data)
        sent = exchange.reply.sent if isinstance(exchange.reply.sent, dict) else {}
        observations.append(StepRecord(
            label=exchange.label,
            action=sent.get("data") if exchange.op == "step" else None,
            reward=data.get("reward"),
            done=data.get("done") is True,
            digest=digest(data),
            fields=field_digests(data) if detailed else {},
        ))
    ended, failure = _ending(episode, deadline, max_steps, policy_problem)
    steps = [o for o in observations if o.label != "reset"]
    result = EpisodeResult(
        seed=seed,
        reward=sum(s.reward_value for s in steps),
        steps=episode.steps_ok,
        ended=ended,
        wall_s=round(wall_s, 4),
        success=_success(datas),
        episode_id=episode_id,
        failure=clip(failure, 300) if failure else "",
    )
    return EpisodeRecord(policy=policy, seed=seed, episode_id=episode_id, result=result, observations=observations)


# --------------------------------------------------------------------------- #
# Playing
# --------------------------------------------------------------------------- #


def declared_episode_timeout(manifest: dict | None) -> float | None:
    """validation.resources.episode_timeout_s when declared as a positive finite number (RFC 008 declares
    no step bound: this is the only bound an environment declares on its episodes)."""
    block = validation_block(manifest)
    resources = block.get("resources") if isinstance(block, dict) else None
    value = resources.get("episode_timeout_s") if isinstance(resources, dict) else None
    return float(value) if is_number(value) and math.isfinite(value) and value > 0 else None


def episode_id_for(policy: str, seed: int) -> str:
    return f"openenv-hub-baseline-{policy}-{seed}"


def policy_rng(seed: int) -> random.Random:
    """The random policy's generator for a seed (see the module's invariants for why not Random(seed))."""
    return random.Random(f"openenv-hub-baseline/{seed}")


class _Guarded:
    """A policy that turns UnsupportedSchema into a stop, remembering why (a policy must not raise mid-episode)."""

    def __init__(self, policy: Policy):
        self.policy = policy
        self.problem: str | None = None

    def __call__(self, episode: Episode) -> Any:
        try:
            return self.policy(episode)
        except UnsupportedSchema as exc:
            self.problem = f"the policy could not draw an action: {exc}"
            return None


def _policy_makers(names: Sequence[str], action_schema: Any, max_steps: int) -> dict[str, Callable[[int], Policy] | str]:
    """Per policy name, a maker of its Policy for a seed, or why the action schema gives it no action."""
    makers: dict[str, Callable[[int], Policy] | str] = {}
    for name in names:
        try:
            if name == RANDOM:
                random_policy(action_schema, random.Random(0), max_steps=max_steps)  # fails now, not per seed
                makers[name] = lambda seed: random_policy(action_schema, policy_rng(seed), max_steps=max_steps)
            elif name == FIRST_VALID:
                policy = first_valid_policy(action_schema, max_steps=max_steps)
                makers[name] = lambda seed, policy=policy: policy
        except UnsupportedSchema as exc:
            makers[name] = f"no action can be drawn from the action schema: {exc}"
    return makers


class _Player:
    """The clock and the client of one baseline run."""

    def __init__(self, client: ProbeClient, *, total_deadline: float, episode_deadline_s: float,
                 on_progress: Progress | None):
        self.client = client
        self.total_deadline = total_deadline
        self.episode_deadline_s = episode_deadline_s
        self.on_progress = on_progress

    def budget(self, limit: float | None) -> float:
        values = [FRAME_TIMEOUT_S, self.total_deadline - time.monotonic()]
        if limit is not None:
            values.append(limit)
        return max(0.0, min(values))

    def time_left(self) -> bool:
        return self.total_deadline - time.monotonic() > 0

    def play(self, policy: Policy, *, name: str, seed: int, max_steps: int, detailed: bool = False) -> EpisodeRecord:
        episode_id = episode_id_for(name, seed)
        guarded = _Guarded(policy)
        started = time.monotonic()
        deadline = min(started + self.episode_deadline_s, self.total_deadline)
        episode = play_episode(
            self.client, guarded, reset_data={"seed": seed, "episode_id": episode_id}, deadline=deadline,
            budget=self.budget, state_after_step=False, on_progress=self.on_progress,
        )
        return episode_record(
            episode, policy=name, seed=seed, episode_id=episode_id, deadline=deadline, max_steps=max_steps,
            wall_s=time.monotonic() - started, policy_problem=guarded.problem, detailed=detailed,
        )


def _check_arguments(seeds: Sequence[int], policies: Sequence[str], max_steps: int) -> None:
    for seed in seeds:
        if type(seed) is not int or seed < 0:
            raise ValueError(f"seeds must be non-negative integers (OpenEnv's reset seed), got {seed!r}")
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies or len(set(policies)) != len(policies):
        raise ValueError(f"policies must be distinct names among {POLICIES}, got {list(policies)}")
    if type(max_steps) is not int or max_steps < 0:
        raise ValueError(f"max_steps must be a non-negative integer, got {max_steps!r}")


def play_baseline(
    client: ProbeClient,
    *,
    action_schema: Any,
    manifest: dict | None,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    policies: Sequence[str] = POLICIES,
    max_steps: int = DEFAULT_MAX_STEPS,
    episode_deadline_s: float = DEFAULT_EPISODE_DEADLINE_S,
    total_deadline_s: float = DEFAULT_TOTAL_DEADLINE_S,
    on_progress: Progress | None = None,
) -> BaselineResult:
    """Play each policy for each seed (one fresh /ws session per episode), replay the first episode twice,
    and return the evaluations and records; see the module's docstring for the bounds it keeps.

    `action_schema` is /schema's `action`; `manifest` the parsed openenv.yaml (its declared episode timeout
    lowers the episode deadline). Raises ValueError for arguments that make no sense (unknown policy,
    negative seed), and whatever `on_progress` raises; nothing a server does raises.
    """
    _check_arguments(seeds, policies, max_steps)
    started = time.monotonic()
    declared = declared_episode_timeout(manifest)
    episode_deadline_s = min(episode_deadline_s, declared) if declared else episode_deadline_s
    player = _Player(client, total_deadline=started + total_deadline_s, episode_deadline_s=episode_deadline_s,
                     on_progress=on_progress)
    makers = _policy_makers(policies, action_schema, max_steps)
    result = BaselineResult(
        evaluations=[_evaluation(name, makers[name]) for name in policies], records=[], seeds=list(seeds),
        policies=list(policies), max_steps=max_steps, episode_deadline_s=episode_deadline_s,
    )
    not_played = dict.fromkeys(policies, 0)
    for seed in seeds:
        for name in policies:
            maker = makers[name]
            if isinstance(maker, str):
                continue
            if not player.time_left():
                not_played[name] += 1
                continue
            first = result.replayed is None
            record = player.play(maker(seed), name=name, seed=seed, max_steps=max_steps, detailed=first)
            result.records.append(record)
            result.evaluation(name).episodes.append(record.result)
            if first:
                _replay(player, record, result)
    for name, count in not_played.items():
        if count:
            result.evaluation(name).notes.append(
                f"{count} of {len(seeds)} episode(s) not played: the total deadline of {total_deadline_s:g} s passed")
    for evaluation in result.evaluations:
        evaluation.notes += _reward_notes([r for r in result.records if r.policy == evaluation.agent])
    result.wall_s = time.monotonic() - started
    return result


def _evaluation(name: str, maker: Callable[[int], Policy] | str) -> PlayedEvaluation:
    evaluation = PlayedEvaluation(
        agent=name, agent_kind=AGENT_KIND, harness=HARNESS, harness_version=HARNESS_VERSION,
        client_version=CLIENT_VERSION,
    )
    if isinstance(maker, str):
        evaluation.notes.append(clip(maker, 300))
    return evaluation


def _reward_notes(records: list[EpisodeRecord]) -> list[str]:
    """What a reader should know about the rewards summed (values that were not finite numbers count 0)."""
    steps = [s for r in records for s in r.steps]
    null = sum(1 for s in steps if s.reward is None)
    odd = sum(1 for s in steps if s.reward is not None and not (is_number(s.reward) and math.isfinite(s.reward)))
    notes = []
    if null:
        notes.append(f"{null} step reward(s) were null and counted 0")
    if odd:
        notes.append(f"{odd} step reward(s) were not finite numbers and counted 0")
    return notes


def _replay(player: _Player, record: EpisodeRecord, result: BaselineResult) -> None:
    """Play `record`'s actions again REPLAYS times, each on a fresh session with the same seed and episode id."""
    result.replayed = record
    if not record.observations:
        result.notes.append(f"the first episode ({record.policy}, seed {record.seed}) got no observation; not replayed")
        return
    started = time.monotonic()
    actions = record.actions
    for _ in range(REPLAYS):
        if not player.time_left():
            result.notes.append("the total deadline passed before the determinism replay ended")
            break
        result.replays.append(player.play(fixed_actions(actions), name=record.policy, seed=record.seed,
                                          max_steps=len(actions), detailed=True))
    result.replay_wall_s = time.monotonic() - started


# --------------------------------------------------------------------------- #
# The semantic checks
# --------------------------------------------------------------------------- #


def _fmt(value: Any) -> str:
    if is_number(value):
        return f"{value:g}"
    return clip(value, 60)


def _first_difference(played: EpisodeRecord, replay: EpisodeRecord) -> tuple[int, str] | None:
    """Where a replay first differs from the played episode (index, evidence), or None when it does not."""
    ours, theirs = played.observations, replay.observations
    for index in range(max(len(ours), len(theirs))):
        if index >= len(theirs):
            why = replay.result.failure or "it ended there"
            return index, f"the replay stopped after {max(0, len(theirs) - 1)} step(s) where the played episode went on ({clip(why, 120)})"
        if index >= len(ours):
            return index, f"the replay went past the played episode's {len(ours) - 1} step(s)"
        a, b = ours[index], theirs[index]
        if a.digest == b.digest:
            continue
        fields = sorted(k for k in set(a.fields) | set(b.fields) if a.fields.get(k) != b.fields.get(k))
        action = f" (action {clip(a.action, 80)})" if a.action is not None else ""
        parts = [f"{a.label}{action}"]
        if a.fields.get("reward") != b.fields.get("reward"):
            parts.append(f"reward {_fmt(a.reward)} played, {_fmt(b.reward)} replayed")
        parts.append(f"differing: {', '.join(fields[:8]) or 'the reply'}{' …' if len(fields) > 8 else ''}")
        return index, "; ".join(parts)
    return None


def check_determinism(result: BaselineResult) -> CheckResult:
    """hub.determinism: the first episode's seed and actions, replayed on fresh sessions, give the same
    observations and rewards (canonical JSON digests compared per observation, the reset's included)."""
    cid = "hub.determinism"
    played = result.replayed
    if played is None:
        return CheckResult(cid, SKIP, {"replays": 0}, ["no baseline episode was played, so none could be replayed"])
    measured: dict[str, Any] = {
        "policy": played.policy, "seed": played.seed, "episode_id": played.episode_id,
        "actions_replayed": len(played.actions), "replays": len(result.replays),
        "observations_compared": len(played.observations),
    }
    if not played.observations:
        return CheckResult(cid, SKIP, measured, [
            f"the first episode ({played.policy}, seed {played.seed}) got no observation: "
            f"{played.result.failure or 'no reset answer'}"], duration_s=result.replay_wall_s)
    if not result.replays:
        return CheckResult(cid, SKIP, measured, ["no replay was played: the total deadline passed first"],
                           duration_s=result.replay_wall_s)
    header = (f"seed {played.seed} ({played.policy} policy): the reset and {len(played.actions)} recorded action(s) "
              f"replayed {len(result.replays)} time(s), each on a fresh session")
    differences = []
    for number, replay in enumerate(result.replays, 1):
        found = _first_difference(played, replay)
        if found is not None:
            differences.append((found[0], number, found[1]))
    if not differences:
        measured["first_difference"] = None
        return CheckResult(cid, PASS, measured, [
            header, f"all {len(played.observations)} observation(s) and reward(s) identical in every replay "
                    f"(digest of the last: {played.observations[-1].digest})"], duration_s=result.replay_wall_s)
    index, number, evidence = min(differences)
    measured["first_difference"] = {"observation": index, "replay": number}
    measured["replays_differing"] = len(differences)
    return CheckResult(
        cid, FAIL, measured,
        [header, f"replay {number} differs first at {evidence}",
         f"{len(differences)} of {len(result.replays)} replay(s) differ from the played episode"],
        "The same seed and the same actions must give the same episode: draw every random choice from a "
        "generator seeded in reset() (random.Random(seed), numpy's default_rng(seed)), never from the global "
        "one or the clock, and keep timestamps and other per-run values out of observations and rewards.",
        duration_s=result.replay_wall_s,
    )


def _per_policy(result: BaselineResult) -> dict[str, dict]:
    """Step count and reward range per policy that played a step."""
    figures = {}
    for name in result.policies:
        values = [s.reward_value for r in result.records if r.policy == name for s in r.steps]
        if values:
            figures[name] = {"steps": len(values), "min": min(values), "max": max(values)}
    return figures


def check_reward_spread(result: BaselineResult, manifest: dict | None) -> CheckResult:
    """hub.reward_spread: the baselines see more than one reward value (a reward that never moves teaches nothing)."""
    cid = "hub.reward_spread"
    steps = [s for r in result.records for s in r.steps]
    declared = declared_reward_range(manifest)
    lo, hi = reward_range(manifest)
    range_text = f"{'declared' if declared else 'default'} range [{lo:g}, {hi:g}]"
    if not steps:
        return CheckResult(cid, SKIP, {"steps": 0, "episodes": len(result.records)},
                           [f"no step was played in {len(result.records)} episode(s): there is no reward to look at"])
    values = [s.reward_value for s in steps]
    low, high = min(values), max(values)
    above = sum(1 for v in values if v > low)
    at_declared_min = sum(1 for v in values if v == lo)
    measured = {
        "steps": len(values), "episodes": len(result.records), "min": low, "max": high,
        "mean": round(statistics.fmean(values), 6), "distinct_values": min(len(set(values)), 1000),
        "steps_above_min": above, "steps_at_range_min": at_declared_min,
        "reward_range": [lo, hi], "range_declared": declared is not None,
        "null_rewards": sum(1 for s in steps if s.reward is None),
        "per_policy": _per_policy(result),
    }
    if high > low:
        return CheckResult(cid, PASS, measured, [
            f"step rewards from {low:g} to {high:g} over {len(values)} step(s) of {len(result.records)} episode(s); "
            f"{above} step(s) ({above / len(values):.1%}) above the minimum seen",
            f"{range_text}: its minimum {lo:g} was seen on {at_declared_min} step(s)",
        ])
    where = "the minimum of the " + range_text if low == lo else f"inside the {range_text}"
    return CheckResult(
        cid, FAIL, measured,
        [f"all {len(values)} step reward(s) of {len(result.records)} episode(s) were {low:g} ({where})",
         f"policies played: {', '.join(result.policies)}; null rewards counted 0: {measured['null_rewards']}"],
        "A reward that never moves gives an agent nothing to learn from: make it depend on what the agent does "
        "(partial credit, or a success reward that random play can reach), and check that step() returns it.",
    )


def check_episode_termination(result: BaselineResult, manifest: dict | None) -> CheckResult:
    """hub.episode_termination: some episode ends (done) within the step bound and the declared episode timeout."""
    cid = "hub.episode_termination"
    records = result.records
    timeout = declared_episode_timeout(manifest)
    counts = {ending: sum(1 for r in records if r.result.ended == ending) for ending in (DONE, STEP_BOUND, TIME_BOUND, FAILED)}
    done = [r for r in records if r.result.ended == DONE]
    in_time = [r for r in done if timeout is None or r.result.wall_s <= timeout]
    steps_to_done = sorted(r.result.steps for r in in_time)
    measured = {
        "episodes": len(records), "ended_done": len(in_time), "step_bound": result.max_steps,
        "stopped_at_step_bound": counts[STEP_BOUND], "stopped_at_time_bound": counts[TIME_BOUND],
        "failed": counts[FAILED], "declared_episode_timeout_s": timeout,
        "done_after_declared_timeout": len(done) - len(in_time),
        "steps_to_done": ({"min": steps_to_done[0], "median": statistics.median(steps_to_done), "max": steps_to_done[-1]}
                          if steps_to_done else None),
    }
    bound = f"{result.max_steps} steps" + (f" and the declared episode timeout of {timeout:g} s" if timeout else "")
    tally = (f"{counts[STEP_BOUND]} stopped at the step bound, {counts[TIME_BOUND]} at the time bound, "
             f"{counts[FAILED]} failed")
    if records and counts[FAILED] == len(records):
        return CheckResult(cid, SKIP, measured, [
            f"every one of the {len(records)} episode(s) failed before it could end or reach a bound "
            f"(first: {clip(records[0].result.failure, 160)})"])
    if not records:
        return CheckResult(cid, SKIP, measured, ["no baseline episode was played"])
    if in_time:
        return CheckResult(cid, PASS, measured, [
            f"{len(in_time)} of {len(records)} episode(s) ended with done within {bound} "
            f"(steps to done: min {steps_to_done[0]}, median {statistics.median(steps_to_done):g}, max {steps_to_done[-1]})",
            f"the others: {tally}",
        ])
    evidence = [f"none of the {len(records)} episode(s) ended with done within {bound}: {tally}"]
    if done:
        evidence.append(f"{len(done)} ended with done after the declared episode timeout of {timeout:g} s")
    return CheckResult(
        cid, FAIL, measured, evidence,
        "Set done=True when an episode is over (solved, failed, or out of moves: a turn limit in reset()'s "
        "options or the environment's own), so an episode ends without the agent having to stop it.",
    )


def semantic_checks(result: BaselineResult, manifest: dict | None) -> list[CheckResult]:
    """The level-3 hub checks over a baseline (SEMANTIC_CHECK_IDS, in that order). Pure: no I/O, since
    `play_baseline` already played the determinism replay."""
    return [
        check_determinism(result),
        check_reward_spread(result, manifest),
        check_episode_termination(result, manifest),
    ]
