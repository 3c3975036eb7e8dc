# SPDX-License-Identifier: BSD-3-Clause

"""Data models for the Echo environment: one action, one observation."""

from openenv.core.env_server.types import Action, Observation
from pydantic import Field


class EchoAction(Action):
    """The message the agent wants echoed back."""

    message: str = Field(..., description="Message to echo back")


class EchoObservation(Observation):
    """What the server echoed, and how long it was."""

    echoed_message: str = Field(default="", description="The echoed message")
    message_length: int = Field(default=0, ge=0, description="Length of the echoed message")
