# SPDX-License-Identifier: BSD-3-Clause

"""Data models for the Guess Number environment."""

from typing import Literal

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

LOW = 1
HIGH = 100
DEFAULT_MAX_ATTEMPTS = 7  # enough for a binary search over 1..100

Feedback = Literal["start", "higher", "lower", "correct", "out_of_attempts", "episode_over"]


class GuessNumberAction(Action):
    """One guess at the secret number."""

    guess: int = Field(..., ge=LOW, le=HIGH, description=f"Guess between {LOW} and {HIGH}")


class GuessNumberObservation(Observation):
    """Feedback on the last guess."""

    feedback: Feedback = Field(
        default="start",
        description="'higher'/'lower' if the secret is above/below the guess, "
        "'correct' on a hit, 'out_of_attempts' when the last attempt missed",
    )
    low: int = Field(default=LOW, description="Smallest possible secret")
    high: int = Field(default=HIGH, description="Largest possible secret")
    attempts: int = Field(default=0, ge=0, description="Guesses made this episode")
    attempts_left: int = Field(default=DEFAULT_MAX_ATTEMPTS, ge=0, description="Guesses left")


class GuessNumberState(State):
    """Episode state: id, step count, attempts and whether it was solved."""

    attempts: int = Field(default=0, ge=0, description="Guesses made this episode")
    max_attempts: int = Field(default=DEFAULT_MAX_ATTEMPTS, ge=1, description="Guess budget")
    solved: bool = Field(default=False, description="Whether the secret was guessed")
