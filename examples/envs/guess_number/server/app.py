# SPDX-License-Identifier: BSD-3-Clause

"""
FastAPI application for the Guess Number environment.

Run from this package's directory (the way a Space runs it):

    uvicorn server.app:app --host 0.0.0.0 --port 8000
"""

try:
    from openenv.core.env_server.http_server import create_app
except Exception as e:  # pragma: no cover
    raise ImportError(
        "openenv is required to serve this environment: pip install 'openenv==0.10.0'"
    ) from e

try:
    from ..models import GuessNumberAction, GuessNumberObservation, GuessNumberState
    from .guess_number_environment import GuessNumberEnvironment
except ImportError:
    from models import GuessNumberAction, GuessNumberObservation, GuessNumberState
    from server.guess_number_environment import GuessNumberEnvironment


app = create_app(
    GuessNumberEnvironment,
    GuessNumberAction,
    GuessNumberObservation,
    env_name="guess_number",
    state_cls=GuessNumberState,  # publishes attempts/max_attempts/solved in /schema
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
