"""Write a small `openenv collect` dataset with OpenEnv's own code (run it with an interpreter that has openenv 0.10.0).

    python -B tests/data/collect/make_dataset.py OUTPUT_DIR

It drives openenv.core.harness.collect.CollectRunner (what `openenv collect` runs) with the collect command's own
scripted teacher (openenv/cli/commands/collect.py) against an in-process counting game behind OpenEnv's
StepEnvSessionAdapter, then writes metadata.json exactly as the collect command does and the dataset card that
`--push-to-hub` uploads (build_dataset_readme). The files in tests/data/collect/counter-run/ were made this way;
nothing in them is hand-written.
"""

from __future__ import annotations

import sys
from pathlib import Path

from openenv.cli.commands.collect import _build_scripted_model_step
from openenv.core.client_types import StepResult
from openenv.core.env_server.mcp_types import Tool
from openenv.core.env_server.types import State
from openenv.core.harness import HarnessRunLimits, MCPHarnessAdapter, StepEnvSessionAdapter
from openenv.core.harness.collect import CollectRunner, RolloutSerializer, build_dataset_readme

BASE_URL = "https://openenv-counter-env.hf.space"
MAX_TURNS = 4


class CountingGame:
    """Pick action 0 until the counter reaches its target; each step pays 0.25 (the last one 1.0)."""

    def __init__(self, target: int):
        self.target = target
        self.state_ = State()

    def reset(self, seed=None, episode_id=None, **kwargs):
        self.state_ = State(episode_id=episode_id, step_count=0)
        return StepResult(observation={"legal_actions": [0, 1], "count": 0}, reward=None, done=False)

    def step(self, action):
        self.state_.step_count += 1
        done = self.state_.step_count >= self.target
        return StepResult(observation={"legal_actions": [0, 1], "count": self.state_.step_count},
                          reward=1.0 if done else 0.25, done=done)

    def state(self):
        return self.state_

    def close(self):
        pass


class Factory:
    """Targets 2, 3, 9, 1: the third episode outlasts --max-turns (done false)."""

    targets = iter([2, 3, 9, 1])

    def create(self, task=None, seed=None, episode_id=None):
        return StepEnvSessionAdapter(
            CountingGame(next(self.targets)), task=task, seed=seed, episode_id=episode_id,
            tool_specs=[Tool(name="play_move", description="Play an action id.",
                             input_schema={"type": "object", "properties": {"action_id": {"type": "integer"}}})],
            action_builder=lambda name, arguments: dict(arguments),
            initial_messages_builder=lambda result, task: [
                {"role": "user", "content": f"Legal actions: {result.observation['legal_actions']}"}],
        )


def main(output_dir: Path) -> None:
    serializer = RolloutSerializer(output_dir)
    serializer.write_metadata({  # the dict openenv/cli/commands/collect.py writes, for `--provider scripted`
        "env": "openspiel:counter", "env_base_url": BASE_URL, "provider": "scripted", "model": None,
        "llm_endpoint": None, "llm_port": None, "num_episodes_requested": 4, "temperature": 0.2,
        "keep_losses": False,
    })
    runner = CollectRunner(session_factory=Factory(), harness_adapter=MCPHarnessAdapter(), serializer=serializer,
                           limits=HarnessRunLimits(max_turns=MAX_TURNS))
    runner.run(model_step=_build_scripted_model_step(), num_episodes=4, episode_id_prefix="ep",
               should_keep=lambda record: record.reward >= 0.0)
    (output_dir / "README.md").write_text(build_dataset_readme(output_dir), encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
