# SPDX-License-Identifier: BSD-3-Clause

"""MCP Calculator environment: add/subtract/multiply/divide as MCP tools."""

from .client import McpCalculatorEnv
from .models import CallToolAction, CallToolObservation, ListToolsAction, McpCalculatorState

__all__ = [
    "CallToolAction",
    "CallToolObservation",
    "ListToolsAction",
    "McpCalculatorEnv",
    "McpCalculatorState",
]
