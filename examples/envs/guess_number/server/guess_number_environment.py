# SPDX-License-Identifier: BSD-3-Clause

"""
Guess Number environment.

``reset(seed=...)`` draws a secret integer in [1, 100] from ``random.Random(seed)``,
so the same seed always gives the same secret (no seed: a fresh random one).
Each step is one guess: reward 1.0 for the right number, else 0.0. The episode
ends on a hit or when the guess budget (``max_attempts``, default 7, settable as
a reset option) is spent. Steps after the end are counted but score 0.0.
"""

import random
from typing import Any, Optional
from uuid import uuid4

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

try:
    from ..models import (
        DEFAULT_MAX_ATTEMPTS,
        HIGH,
        LOW,
        GuessNumberAction,
        GuessNumberObservation,
        GuessNumberState,
    )
except ImportError:
    from models import (
        DEFAULT_MAX_ATTEMPTS,
        HIGH,
        LOW,
        GuessNumberAction,
        GuessNumberObservation,
        GuessNumberState,
    )


def secret_for_seed(seed: int) -> int:
    """The secret a given seed produces (deterministic across hosts)."""
    return random.Random(seed).randint(LOW, HIGH)


class GuessNumberEnvironment(Environment):
    """Seeded number guessing with a bounded number of attempts."""

    SUPPORTS_CONCURRENT_SESSIONS: bool = True

    def __init__(self) -> None:
        super().__init__()
        self._secret = secret_for_seed(random.SystemRandom().randrange(2**32))
        self._state = GuessNumberState(episode_id=str(uuid4()), step_count=0)

    def reset(
        self,
        seed: Optional[int] = None,
        episode_id: Optional[str] = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        **kwargs: Any,
    ) -> GuessNumberObservation:
        if seed is None:
            seed = random.SystemRandom().randrange(2**32)
        max_attempts = max(1, int(max_attempts))
        self._secret = secret_for_seed(seed)
        self._state = GuessNumberState(
            episode_id=episode_id if episode_id is not None else str(uuid4()),
            step_count=0,
            attempts=0,
            max_attempts=max_attempts,
            solved=False,
        )
        return GuessNumberObservation(
            feedback="start",
            attempts=0,
            attempts_left=max_attempts,
            done=False,
            reward=None,
        )

    def step(
        self,
        action: GuessNumberAction,
        timeout_s: Optional[float] = None,
        **kwargs: Any,
    ) -> GuessNumberObservation:  # type: ignore[override]
        state = self._state
        state.step_count += 1
        finished = state.solved or state.attempts >= state.max_attempts
        if finished:
            return self._observation("episode_over", reward=0.0, done=True)

        state.attempts += 1
        if action.guess == self._secret:
            state.solved = True
            return self._observation("correct", reward=1.0, done=True)
        if state.attempts >= state.max_attempts:
            return self._observation("out_of_attempts", reward=0.0, done=True)
        feedback = "higher" if self._secret > action.guess else "lower"
        return self._observation(feedback, reward=0.0, done=False)

    def _observation(self, feedback: str, *, reward: float, done: bool) -> GuessNumberObservation:
        state = self._state
        return GuessNumberObservation(
            feedback=feedback,
            attempts=state.attempts,
            attempts_left=state.max_attempts - state.attempts,
            done=done,
            reward=reward,
        )

    @property
    def state(self) -> GuessNumberState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="guess_number",
            description="Guess a seeded secret number in [1, 100]; reward 1.0 on a hit.",
            version="0.1.0",
        )
