# SPDX-License-Identifier: BSD-3-Clause

"""
Echo environment.

Every step echoes the action's message back. The reward grows with the
message length, ``min(1.0, len(message) / 100)``, so it always lies in
[0, 1]. The episode never ends on its own (``done`` is always false).
"""

from typing import Any, Optional
from uuid import uuid4

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import State

try:
    from ..models import EchoAction, EchoObservation
except ImportError:
    from models import EchoAction, EchoObservation

READY_MESSAGE = "Echo environment ready!"


def echo_reward(message: str) -> float:
    """Bounded, deterministic reward: 0.01 per character, capped at 1.0."""
    return min(1.0, len(message) / 100.0)


class EchoEnvironment(Environment):
    """Echoes messages back; keeps only an episode id and a step counter."""

    # Each instance holds its own state, so sessions are isolated.
    SUPPORTS_CONCURRENT_SESSIONS: bool = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=str(uuid4()), step_count=0)

    def reset(
        self,
        seed: Optional[int] = None,
        episode_id: Optional[str] = None,
        **kwargs: Any,
    ) -> EchoObservation:
        """Start a new episode (the seed is accepted; nothing here is random)."""
        self._state = State(
            episode_id=episode_id if episode_id is not None else str(uuid4()),
            step_count=0,
        )
        return EchoObservation(
            echoed_message=READY_MESSAGE,
            message_length=0,
            done=False,
            reward=0.0,
        )

    def step(
        self,
        action: EchoAction,
        timeout_s: Optional[float] = None,
        **kwargs: Any,
    ) -> EchoObservation:  # type: ignore[override]
        """Echo the message back."""
        self._state.step_count += 1
        message = action.message
        return EchoObservation(
            echoed_message=message,
            message_length=len(message),
            done=False,
            reward=echo_reward(message),
            metadata={"step": self._state.step_count},
        )

    @property
    def state(self) -> State:
        """Current episode id and step count."""
        return self._state
