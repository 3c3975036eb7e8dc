"""What people see: colour and a live progress line on a terminal, plain text when piped.

Colour goes to a stream only when it is a terminal, `NO_COLOR` is unset and `TERM` is not `dumb`. The progress
line is drawn on stderr, and only when stderr is a terminal; piped, a command reports its stages as plain
lines on stderr (each stage once), and stdout holds only the result.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from typing import TextIO

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
STATUS_LOOK = {  # status -> (symbol, colour)
    "pass": ("✓", "32"), "fail": ("✗", "31"), "error": ("!", "31"), "skip": ("-", "33"), "warn": ("~", "33"),
}
VERDICT_WORDS = {"pass": "PASS", "warn": "WARN", "fail": "FAIL", "error": "ERROR"}


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Style:
    """ANSI colour for one stream, or none at all."""

    def __init__(self, stream: TextIO) -> None:
        self.color = is_terminal(stream) and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"
        self.width = shutil.get_terminal_size((100, 24)).columns if self.color else None

    def paint(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color else text

    def bold(self, text: str) -> str:
        return self.paint(text, "1")

    def dim(self, text: str) -> str:
        return self.paint(text, "2")

    def status(self, status: str, width: int = 5) -> str:
        """A check's status or a verdict, as a fixed-width label."""
        word = VERDICT_WORDS.get(status, status.upper())
        symbol, code = STATUS_LOOK.get(status, ("?", "0"))
        if not self.color:
            return word.ljust(width)
        return self.paint(f"{symbol} {word.ljust(width)}", code)

    def fit(self, text: str, indent: int = 0) -> str:
        """`text` cut to the terminal's width (piped output is never cut)."""
        if self.width is None or len(text) + indent <= self.width:
            return text
        return text[: max(10, self.width - indent - 1)] + "…"


class Progress:
    """A live status line on stderr while something slow runs.

    `update(message)` replaces the line (on a terminal, redrawn with a spinner and the time elapsed); piped,
    `update(message, plain=True)` prints the message once as a line of its own, and other updates print
    nothing. `note(line)` prints a permanent line in both cases.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.live = is_terminal(self.stream)
        self.message = ""
        self._printed: set[str] = set()
        self._started = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Progress:
        if self.live:
            self._thread = threading.Thread(target=self._spin, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            self._clear()

    def update(self, message: str, *, plain: bool = False) -> None:
        with self._lock:
            self.message = message
            if self.live:
                self._draw()
            elif plain and message not in self._printed:
                self._printed.add(message)
                print(message, file=self.stream, flush=True)

    def note(self, line: str) -> None:
        with self._lock:
            self._clear()
            print(line, file=self.stream, flush=True)
            if self.live:
                self._draw()

    def _spin(self) -> None:
        while not self._stop.wait(0.1):
            with self._lock:
                self._draw()

    def _draw(self) -> None:
        if not self.message:
            return
        frame = SPINNER[int((time.monotonic() - self._started) * 10) % len(SPINNER)]
        elapsed = time.monotonic() - self._started
        width = shutil.get_terminal_size((100, 24)).columns
        line = f"{frame} {self.message} ({elapsed:.0f} s)"
        self.stream.write("\r\x1b[2K" + line[: width - 1])
        self.stream.flush()

    def _clear(self) -> None:
        if self.live:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()


# ---- rendering ---------------------------------------------------------------------------------------------


def failing(report: dict) -> list[dict]:
    return [r for r in report.get("results", []) if r.get("status") in ("fail", "error")]


def report_lines(report: dict, style: Style) -> list[str]:
    """Every check with its status and first line of evidence; failing ones with all their evidence and the
    remediation; then the verdict."""
    results = report.get("results") or []
    width = max([len(r.get("check_id", "")) for r in results] + [10])
    lines = []
    for result in results:
        status, evidence = result.get("status", "?"), result.get("evidence") or []
        head = f"  {style.status(status)} {result.get('check_id', '?').ljust(width)}  "
        first = evidence[0] if evidence else ""
        lines.append(head + style.fit(first, indent=len(head)))
        if status in ("fail", "error"):
            lines += [f"{' ' * 10}{style.dim(line)}" for line in evidence[1:6]]
            if result.get("remediation"):
                lines.append(f"{' ' * 10}{style.bold('fix:')} {result['remediation']}")
    lines.append("")
    lines.append(verdict_line(report.get("verdict", "?"), [r["check_id"] for r in failing(report)], style))
    return lines


def verdict_line(outcome: str, failing_checks: list[str], style: Style) -> str:
    line = f"verdict: {style.status(outcome, width=0).rstrip()}"
    if failing_checks:
        line += f" ({len(failing_checks)} failing: {', '.join(failing_checks)})"
    return line


def badge_markdown(hub: str, repo_id: str, page_url: str) -> str:
    return f"[![conformance]({hub}/badges/{repo_id}/conformance.svg)]({page_url})"


def remediation_lines(report: dict | None, failing_checks: list[str], style: Style) -> list[str]:
    """The failing checks of a stored report, each with its evidence and remediation."""
    by_id = {r.get("check_id"): r for r in (report or {}).get("results", [])}
    lines = []
    for check_id in failing_checks:
        result = by_id.get(check_id) or {}
        lines.append(f"  {style.status(result.get('status', 'fail'))} {check_id}")
        lines += [f"{' ' * 10}{style.dim(line)}" for line in (result.get("evidence") or [])[:5]]
        if result.get("remediation"):
            lines.append(f"{' ' * 10}{style.bold('fix:')} {result['remediation']}")
    return lines


def pull_lines(pull_forms: list[dict], style: Style) -> list[str]:
    lines = []
    for form in pull_forms:
        lines.append(f"  {style.bold(form.get('label', form.get('kind', '')))}")
        lines += [f"    {line}" for line in str(form.get("text", "")).splitlines()]
    return lines


def environment_lines(detail: dict, latest: dict | None, hub: str, style: Style) -> list[str]:
    """One environment, as `info` and `push` show it."""
    repo_id = detail.get("id", "?")
    lines = [style.bold(repo_id) + (f"  {detail['description']}" if detail.get("description") else "")]
    head = detail.get("head_sha") or ""
    status = detail.get("status", "")
    lines.append(f"  head      {head[:12] or 'none yet'}" + (f"  ({status}: {detail.get('status_reason')})"
                                                              if status and status != "active" else ""))
    verdict = detail.get("verdict")
    if verdict:
        at = (verdict.get("revision") or "")[:12]
        stale = "" if verdict.get("revision") == head else style.dim("  (an earlier revision: head not validated yet)")
        lines.append(f"  verdict   {style.status(verdict.get('outcome', '?'), width=0).rstrip()} at {at}, "
                     f"{verdict.get('finished_at', '')} (run {verdict.get('run_id')}){stale}")
    else:
        lines.append("  verdict   not validated yet")
    lines.append(f"  page      {detail.get('page_url', '')}")
    failing_checks = (verdict or {}).get("failing_checks") or []
    if failing_checks:
        lines += ["", "Failing checks:"]
        lines += remediation_lines((latest or {}).get("report"), failing_checks, style)
    if detail.get("pull_forms"):
        lines += ["", "Pull it:"] + pull_lines(detail["pull_forms"], style)
    lines += ["", "Badge (Markdown):", f"  {badge_markdown(hub, repo_id, detail.get('page_url', ''))}"]
    return lines


def search_lines(page: dict, style: Style) -> list[str]:
    results = page.get("results") or []
    if not results:
        return ["No environment matches."]
    width = max(len(r.get("id", "")) for r in results)
    lines = [style.bold(f"{'ENVIRONMENT'.ljust(width)}  {'VERDICT'.ljust(7)}  DESCRIPTION")]
    for item in results:
        outcome = (item.get("verdict") or {}).get("outcome") or "-"
        label = style.paint(outcome.ljust(7), STATUS_LOOK.get(outcome, ("", "0"))[1]) if style.color else outcome.ljust(7)
        prefix = f"{item.get('id', '').ljust(width)}  {label}  "
        lines.append(prefix + style.fit(item.get("description") or "", indent=width + 11))
    if page.get("next"):
        lines.append(style.dim("(more: --limit up to 200, or --json for the next page's URL)"))
    return lines
