# SPDX-License-Identifier: BSD-3-Clause

"""
FastAPI application for the MCP Calculator environment.

Run from this package's directory (the way a Space runs it):

    uvicorn server.app:app --host 0.0.0.0 --port 8000
"""

try:
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
    from openenv.core.env_server.types import Observation
except Exception as e:  # pragma: no cover
    raise ImportError(
        "openenv is required to serve this environment: pip install 'openenv==0.10.0'"
    ) from e

try:
    from ..models import McpCalculatorState
    from .mcp_calculator_environment import McpCalculatorEnvironment
except ImportError:
    from models import McpCalculatorState
    from server.mcp_calculator_environment import McpCalculatorEnvironment


app = create_app(
    McpCalculatorEnvironment,
    CallToolAction,  # steps are MCP tool calls
    CallToolObservation,
    env_name="mcp_calculator",
    state_cls=McpCalculatorState,
    reset_observation_cls=Observation,  # reset returns a plain observation
    max_concurrent_envs=1,  # raise to allow more concurrent WebSocket sessions
)


def main() -> None:
    """Entry point for ``python -m server.app`` and the ``server`` script."""
    import argparse

    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
