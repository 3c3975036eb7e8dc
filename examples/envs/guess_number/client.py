# SPDX-License-Identifier: BSD-3-Clause

"""Typed client for the Guess Number environment."""

from typing import Any, Dict

from openenv.core import EnvClient
from openenv.core.client_types import StepResult

from .models import GuessNumberAction, GuessNumberObservation, GuessNumberState


class GuessNumberEnv(EnvClient[GuessNumberAction, GuessNumberObservation, GuessNumberState]):
    """
    Client for the Guess Number environment.

    Example:
        >>> with GuessNumberEnv(base_url="http://localhost:8000").sync() as env:
        ...     env.reset(seed=7, episode_id="demo")
        ...     env.step(GuessNumberAction(guess=50)).observation.feedback
        'higher'
    """

    def _step_payload(self, action: GuessNumberAction) -> Dict[str, Any]:
        return {"guess": action.guess}

    def _parse_result(self, payload: Dict[str, Any]) -> StepResult[GuessNumberObservation]:
        obs = dict(payload.get("observation", {}))
        obs["done"] = payload.get("done", False)
        obs["reward"] = payload.get("reward")
        observation = GuessNumberObservation.model_validate(obs)
        return StepResult(
            observation=observation,
            reward=payload.get("reward"),
            done=payload.get("done", False),
        )

    def _parse_state(self, payload: Dict[str, Any]) -> GuessNumberState:
        return GuessNumberState.model_validate(payload)
