# SPDX-License-Identifier: BSD-3-Clause

"""Echo environment server components."""

from .echo_env_environment import EchoEnvironment

__all__ = ["EchoEnvironment"]
