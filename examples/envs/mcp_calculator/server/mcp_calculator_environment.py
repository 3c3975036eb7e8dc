# SPDX-License-Identifier: BSD-3-Clause

"""
MCP Calculator environment.

An ``MCPEnvironment`` whose FastMCP server exposes four arithmetic tools:
``add``, ``subtract``, ``multiply`` and ``divide`` (each takes numbers ``a`` and ``b``).
They are listed by ``tools/list`` on ``/mcp`` and callable through
``tools/call`` or a ``call_tool`` step. A step's reward is 1.0 when the tool call
succeeded and 0.0 when it failed (unknown tool, bad arguments, division by
zero) or for a ``list_tools`` step. The episode never ends on its own.
"""

import math
from typing import Any, Optional
from uuid import uuid4

from fastmcp import FastMCP
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolObservation
from openenv.core.env_server.types import Action, Observation

try:
    from ..models import McpCalculatorState
except ImportError:
    from models import McpCalculatorState


def build_calculator_server() -> FastMCP:
    """A fresh FastMCP server with the calculator tools (one per environment)."""
    mcp = FastMCP("calculator")

    @mcp.tool
    def add(a: float, b: float) -> float:
        """Return a + b."""
        return a + b

    @mcp.tool
    def subtract(a: float, b: float) -> float:
        """Return a - b."""
        return a - b

    @mcp.tool
    def multiply(a: float, b: float) -> float:
        """Return a * b."""
        return a * b

    @mcp.tool
    def divide(a: float, b: float) -> float:
        """Return a / b; dividing by zero is an error."""
        if b == 0:
            raise ValueError("division by zero")
        return a / b

    return mcp


def _call_result_value(observation: CallToolObservation) -> Optional[float]:
    """The numeric result of a successful call, or None if the call failed."""
    if observation.error is not None:
        return None
    result = observation.result
    if result is None or getattr(result, "is_error", False):
        return None
    data = getattr(result, "data", None)
    if isinstance(data, (int, float)) and not isinstance(data, bool) and math.isfinite(data):
        return float(data)
    return None


class McpCalculatorEnvironment(MCPEnvironment):
    """Arithmetic tools over MCP; reward 1.0 per successful tool call."""

    SUPPORTS_CONCURRENT_SESSIONS: bool = True

    def __init__(self) -> None:
        super().__init__(build_calculator_server())
        self._state = McpCalculatorState(episode_id=str(uuid4()), step_count=0)

    def reset(
        self,
        seed: Optional[int] = None,
        episode_id: Optional[str] = None,
        **kwargs: Any,
    ) -> Observation:
        self._state = McpCalculatorState(
            episode_id=episode_id if episode_id is not None else str(uuid4()),
            step_count=0,
        )
        return Observation(
            done=False,
            reward=None,
            metadata={
                "message": "Calculator ready: call add, subtract, multiply or divide.",
                "tools": ["add", "subtract", "multiply", "divide"],
            },
        )

    def _score(self, observation: Observation) -> Observation:
        """Count the step and give the reward (MCP observations carry none)."""
        self._state.step_count += 1
        if isinstance(observation, CallToolObservation):
            value = _call_result_value(observation)
            if value is None:
                observation.reward = 0.0
            else:
                observation.reward = 1.0
                self._state.successful_calls += 1
                self._state.last_result = value
        elif observation.reward is None:
            observation.reward = 0.0
        observation.done = False
        return observation

    def step(
        self,
        action: Action,
        timeout_s: Optional[float] = None,
        **kwargs: Any,
    ) -> Observation:
        return self._score(super().step(action, timeout_s=timeout_s, **kwargs))

    async def step_async(
        self,
        action: Action,
        timeout_s: Optional[float] = None,
        **kwargs: Any,
    ) -> Observation:
        observation = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        return self._score(observation)

    def _step_impl(
        self,
        action: Action,
        timeout_s: Optional[float] = None,
        **kwargs: Any,
    ) -> Observation:
        # Only MCP actions are accepted by the server's action model.
        return Observation(
            done=False,
            reward=0.0,
            metadata={"error": f"unsupported action {type(action).__name__}"},
        )

    @property
    def state(self) -> McpCalculatorState:
        return self._state
