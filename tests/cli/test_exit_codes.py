"""The exit-code rules and argument errors, in process (no server needed)."""

from __future__ import annotations

import pytest

from cli import main
from cli.errors import EXIT_FAIL, EXIT_OK, EXIT_USAGE


@pytest.mark.parametrize("outcome, strict, code", [
    ("pass", False, EXIT_OK), ("pass", True, EXIT_OK),
    ("warn", False, EXIT_OK), ("warn", True, EXIT_FAIL),
    ("fail", False, EXIT_FAIL), ("error", False, EXIT_FAIL),
])
def test_verdict_exit_codes(outcome, strict, code):
    assert main._verdict_exit(outcome, strict=strict) == code


@pytest.mark.parametrize("argv", [
    [], ["frobnicate"], ["check"], ["push", "--timeout", "0"], ["search", "--limit", "500"],
    ["search", "--verdict", "green"],
])
def test_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        main.main(argv)
    assert exited.value.code == EXIT_USAGE
    assert capsys.readouterr().err.startswith("usage: openenv-hub")
