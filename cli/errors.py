"""Exit codes, and the errors that end a command with one sentence instead of a traceback."""

from __future__ import annotations

EXIT_OK = 0  # done; for check and push: the verdict is pass (or warn, without --strict)
EXIT_FAIL = 1  # the verdict is fail (or warn, with --strict)
EXIT_USAGE = 2  # the command line or what it names is wrong (argparse's own code for bad arguments)
EXIT_UNREACHABLE = 3  # the hub, the Hugging Face Hub or the network failed us, or refused (4xx/5xx)
EXIT_TIMEOUT = 4  # push: the hub did not index and validate the revision within --timeout
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """Ends the command: `str(error)` is printed as it is, and the process exits with `exit_code`."""

    exit_code = EXIT_UNREACHABLE


class UsageError(CliError):
    exit_code = EXIT_USAGE


class HubRefused(CliError):
    """The hub answered with an error; `status` and `code` are from its answer and envelope."""

    def __init__(self, message: str, *, status: int, code: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class TimedOut(CliError):
    exit_code = EXIT_TIMEOUT
