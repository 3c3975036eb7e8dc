# SPDX-License-Identifier: BSD-3-Clause

"""
Data models for the MCP Calculator environment.

The environment speaks OpenEnv's MCP action types: ``CallToolAction``
(``{"type": "call_tool", "tool_name": ..., "arguments": {...}}``) and
``ListToolsAction`` (``{"type": "list_tools"}``). Its own model is the state.
"""

from typing import Optional

from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
)
from openenv.core.env_server.types import Observation, State
from pydantic import Field


class McpCalculatorState(State):
    """Episode id, step count, and the result of the last successful tool call."""

    successful_calls: int = Field(default=0, ge=0, description="Tool calls that succeeded")
    last_result: Optional[float] = Field(default=None, description="Last successful result")


__all__ = [
    "CallToolAction",
    "CallToolObservation",
    "ListToolsAction",
    "ListToolsObservation",
    "McpCalculatorState",
    "Observation",
]
