# SPDX-License-Identifier: BSD-3-Clause

"""Client for the MCP Calculator environment: OpenEnv's generic MCP tool client."""

from openenv.core.mcp_client import MCPToolClient


class McpCalculatorEnv(MCPToolClient):
    """
    Client for the MCP Calculator environment.

    Example:
        >>> with McpCalculatorEnv(base_url="http://localhost:8000").sync() as env:
        ...     env.reset()
        ...     [tool.name for tool in env.list_tools()]
        ['add', 'subtract', 'multiply', 'divide']
        ...     env.call_tool("multiply", a=6, b=7)
        42.0
    """
