# SPDX-License-Identifier: BSD-3-Clause

"""Guess Number environment server components."""

from .guess_number_environment import GuessNumberEnvironment

__all__ = ["GuessNumberEnvironment"]
