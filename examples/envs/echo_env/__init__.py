# SPDX-License-Identifier: BSD-3-Clause

"""Echo environment: echoes a message, reward min(1, len/100), never done."""

from .client import EchoEnv
from .models import EchoAction, EchoObservation

__all__ = ["EchoAction", "EchoObservation", "EchoEnv"]
