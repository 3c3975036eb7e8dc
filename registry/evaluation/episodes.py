"""The record every evaluation produces, whoever played it: one row per episode, and who played them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

# How an episode ended.
DONE = "done"  # the environment said done
STEP_BOUND = "step_bound"  # the player stopped at its step bound
TIME_BOUND = "time_bound"  # the player ran out of time
FAILED = "failed"  # the session broke (no reply, error frame); `failure` says how
ENDINGS = (DONE, STEP_BOUND, TIME_BOUND, FAILED)


@dataclass
class EpisodeResult:
    """One episode: its seed, its reward (the sum of its step rewards), how long and how it ended."""

    seed: int | None
    reward: float
    steps: int
    ended: str  # one of ENDINGS
    wall_s: float = 0.0
    success: bool | None = None  # where the environment reports it
    invalid_actions: int = 0  # replies of a model that were not a valid action
    episode_id: str = ""
    failure: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class PlayedEvaluation:
    """Episodes one agent played against one environment revision, and what played them."""

    agent: str  # "random", "first-valid", a model's name
    agent_kind: str  # "policy" or "model"
    harness: str  # what drove the episodes ("openenv-hub baseline", a submitter's harness)
    harness_version: str
    client_version: str  # the OpenEnv client / protocol version the episodes went through
    episodes: list[EpisodeResult] = field(default_factory=list)
    agent_revision: str = ""  # a model's revision (a Hub commit), when known
    notes: list[str] = field(default_factory=list)  # what a reader of the row should know
