# SPDX-License-Identifier: BSD-3-Clause

"""MCP Calculator environment server components."""

from .mcp_calculator_environment import McpCalculatorEnvironment

__all__ = ["McpCalculatorEnvironment"]
