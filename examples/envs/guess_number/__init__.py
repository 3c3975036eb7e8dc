# SPDX-License-Identifier: BSD-3-Clause

"""Guess Number environment: seeded secret in [1, 100], reward 1.0 on a hit."""

from .client import GuessNumberEnv
from .models import GuessNumberAction, GuessNumberObservation, GuessNumberState

__all__ = ["GuessNumberAction", "GuessNumberObservation", "GuessNumberState", "GuessNumberEnv"]
