# SPDX-License-Identifier: BSD-3-Clause

"""Typed client for the Echo environment (WebSocket session under the hood)."""

from typing import Any, Dict

from openenv.core import EnvClient
from openenv.core.client_types import StepResult
from openenv.core.env_server.types import State

from .models import EchoAction, EchoObservation


class EchoEnv(EnvClient[EchoAction, EchoObservation, State]):
    """
    Client for the Echo environment.

    Example:
        >>> with EchoEnv(base_url="http://localhost:8000").sync() as env:
        ...     env.reset(seed=1, episode_id="demo")
        ...     result = env.step(EchoAction(message="hello"))
        ...     result.observation.echoed_message
        'hello'
    """

    def _step_payload(self, action: EchoAction) -> Dict[str, Any]:
        return {"message": action.message}

    def _parse_result(self, payload: Dict[str, Any]) -> StepResult[EchoObservation]:
        obs = payload.get("observation", {})
        observation = EchoObservation(
            echoed_message=obs.get("echoed_message", ""),
            message_length=obs.get("message_length", 0),
            done=payload.get("done", False),
            reward=payload.get("reward"),
            metadata=obs.get("metadata", {}),
        )
        return StepResult(
            observation=observation,
            reward=payload.get("reward"),
            done=payload.get("done", False),
        )

    def _parse_state(self, payload: Dict[str, Any]) -> State:
        return State(
            episode_id=payload.get("episode_id"),
            step_count=payload.get("step_count", 0),
        )
