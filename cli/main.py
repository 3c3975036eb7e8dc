"""`openenv-hub`: arguments, the commands, and exit codes (cli/errors.py).

Exit codes: 0 done (check, push: verdict pass, or warn without --strict); 1 the verdict is fail (or warn with
--strict); 2 a usage error (bad arguments, a folder that is no package, a bad URL); 3 the hub, the Hugging
Face Hub or the network failed or refused (the reason in one sentence); 4 push: the hub did not index and
validate the revision within --timeout; 130 interrupted.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import tempfile
from pathlib import Path

from cli import config
from cli.errors import (
    EXIT_FAIL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    CliError,
    UsageError,
)
from cli.output import Progress, Style

PROG = "openenv-hub"


def _print_json(data) -> None:
    json.dump(data, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


def _print_lines(lines: list[str]) -> None:
    sys.stdout.write("\n".join(lines) + "\n")


def _verdict_exit(outcome: str, *, strict: bool) -> int:
    if outcome == "pass" or (outcome == "warn" and not strict):
        return EXIT_OK
    return EXIT_FAIL


def _api(args, *, token: str | None = None):
    from cli.api import HubAPI

    return HubAPI(config.hub_url(args.hub), token=token)


def _repo_id(raw: str) -> str:
    from cli.publishing import check_repo_id

    return check_repo_id(raw.strip().strip("/"))


# ---- commands ------------------------------------------------------------------------------------------------


def cmd_check(args) -> int:
    from cli import checking
    from cli.output import report_lines

    style = Style(sys.stdout)
    target = checking.resolve(args.target, url=args.url)
    with Progress() as progress:
        progress.update(f"checking {args.target}", plain=True)

        def step(name: str) -> None:
            message, plain = checking.stage_message(name)
            progress.update(message, plain=plain)

        checked = checking.check(target, progress=step)
    report = checked.report
    if args.json:
        _print_json(report)
    else:
        _print_lines([f"Checked {checked.what} ({len(report['results'])} checks, policy "
                      f"{report['policy_version']})", *report_lines(report, style)])
        if report["verdict"] == "warn" and not args.strict:
            _print_lines([style.dim("(warn exits 0; --strict makes it exit 1)")])
    return _verdict_exit(report["verdict"], strict=args.strict)


def cmd_search(args) -> int:
    from cli.output import search_lines

    filters = {"tag": args.tag, "owner": args.owner, "verdict": args.verdict}
    with _api(args) as api:
        page = api.search(args.query, page_size=args.limit, filters=filters)
    if args.json:
        _print_json(page)
    else:
        _print_lines(search_lines(page, Style(sys.stdout)))
    return EXIT_OK


def cmd_info(args) -> int:
    from cli.output import environment_lines

    repo_id = _repo_id(args.environment)
    with _api(args) as api:
        detail = api.environment(repo_id)
        failing = (detail.get("verdict") or {}).get("failing_checks")
        latest = api.latest_validation(detail.get("id", repo_id)) if failing and not args.json else None
    if args.json:
        _print_json(detail)
    else:
        _print_lines(environment_lines(detail, latest, config.hub_url(args.hub), Style(sys.stdout)))
    return EXIT_OK


def cmd_login(args) -> int:
    hub = config.hub_url(args.hub)
    if sys.stdin.isatty():
        token = getpass.getpass(f"Personal token for {hub} (input hidden): ")
    else:
        token = sys.stdin.readline()
    path = config.store_token(hub, token)
    if args.json:
        _print_json({"hub": hub, "stored": str(path)})
    else:
        print(f"Token for {hub} stored in {path} (readable by you only).")
    return EXIT_OK


def cmd_logout(args) -> int:
    hub = config.hub_url(args.hub)
    removed = config.forget_token(hub)
    if args.json:
        _print_json({"hub": hub, "removed": removed})
    elif removed:
        print(f"Token for {hub} removed from {config.credentials_path()}.")
    else:
        print(f"No token was stored for {hub}.")
    return EXIT_OK


def cmd_push(args) -> int:
    from cli import checking, publishing
    from cli.output import badge_markdown, environment_lines, failing, report_lines
    from registry import folders

    style = Style(sys.stdout)
    hub = config.hub_url(args.hub)
    folder = checking.package_folder(args.directory)
    token, _ = config.hub_token(hub)
    if not token:
        token = _huggingface_token()
    if not token:
        raise UsageError("push needs a token for the hub: run `openenv-hub login` (or set OPENENV_HUB_TOKEN); "
                         "a Hugging Face token (HF_TOKEN) of the Space's owner works too.")
    manifest = folders.package_facts(folder).manifest or {}
    uploader = args.uploader
    if uploader == "auto":
        uploader = "openenv" if publishing.openenv_command() else "huggingface_hub"
    elif uploader == "openenv" and not publishing.openenv_command():
        raise UsageError("--uploader openenv: no `openenv` command on PATH (pip install openenv).")
    result: dict = dict.fromkeys(("check", "published", "repo_id", "sha", "uploader", "refresh", "environment",
                                  "validation", "badge_markdown"))
    result["published"] = False
    with Progress() as progress:
        def say(message: str, plain: bool = True) -> None:
            progress.update(message, plain=plain)

        if not args.no_check:
            say(f"checking {folder}")
            checked = checking.check(checking.Target(folder, None),
                                     progress=lambda step: say(*checking.stage_message(step)))
            result["check"] = checked.report
            outcome = checked.report["verdict"]
            if _verdict_exit(outcome, strict=args.strict) != EXIT_OK and not args.force:
                if args.json:
                    _print_json(result)
                else:
                    _print_lines(["Checked before publishing:", *report_lines(checked.report, style),
                                  "Not published: fix the failing checks (or pass --force to publish anyway)."])
                return EXIT_FAIL
            progress.note(f"checked locally: {outcome} ({len(failing(checked.report))} failing)")
        repo_id = _repo_id(args.repo_id) if args.repo_id else publishing.default_repo_id(
            str(manifest.get("name") or folder.name))
        say(f"publishing {folder.name} to {repo_id} with {uploader}")
        if uploader == "openenv":
            sha = publishing.publish_with_openenv(publishing.openenv_command(), folder, repo_id)
        else:
            with tempfile.TemporaryDirectory(prefix="openenv-hub-push-") as tmp:
                sha = publishing.publish_with_huggingface_hub(folder, repo_id, manifest, Path(tmp) / "staging")
        progress.note(f"published {repo_id} at {sha[:12]} ({uploader})")
        result.update(repo_id=repo_id, sha=sha, uploader=uploader, published=True)
        with _api(args, token=token) as api:
            say(f"asking {hub} to index {repo_id}")
            try:
                result["refresh"] = api.refresh(repo_id)
            except CliError as exc:
                raise CliError(f"Published {repo_id}@{sha[:12]}, but asking the hub to index it failed: {exc}") \
                    from None
            if not args.no_wait:
                detail = publishing.wait_for_verdict(api, repo_id, sha, timeout_s=args.timeout,
                                                     poll_s=args.poll_interval, progress=say)
                latest = api.latest_validation(detail.get("id", repo_id))
                result.update(environment=detail, validation=latest)
    env = result.get("environment")
    page_url = (env or {}).get("page_url") or f"{hub}/environments/{repo_id}/"
    result["badge_markdown"] = badge_markdown(hub, (env or {}).get("id", repo_id), page_url)
    if args.json:
        _print_json(result)
    elif env is None:
        _print_lines([f"The hub was asked to index {repo_id}@{sha[:12]}; `openenv-hub info {repo_id}` shows its "
                      "verdict once it is validated.", "", "Badge (Markdown):", f"  {result['badge_markdown']}"])
    else:
        _print_lines(environment_lines(env, result["validation"], hub, style))
    if env is None:
        return EXIT_OK
    return _verdict_exit(env["verdict"]["outcome"], strict=args.strict)


def _huggingface_token() -> str | None:
    """The publisher's Hugging Face token (HF_TOKEN, or the one `hf auth login` stored), without a request."""
    try:
        from huggingface_hub import get_token
    except ImportError:  # pragma: no cover - a dependency of this project
        return None
    return get_token()


# ---- arguments -----------------------------------------------------------------------------------------------


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be greater than 0")
    return value


def _page_size(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= 200:
        raise argparse.ArgumentTypeError("must be 1 to 200")
    return value


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog=PROG, description="Check, publish and look up OpenEnv environments on an OpenEnv Hub.",
        epilog="Exit codes: 0 done (verdict pass, or warn without --strict), 1 verdict fail, 2 usage error, "
               "3 the hub or the network failed or refused, 4 push timed out. Configuration: OPENENV_HUB_URL "
               f"(default {config.DEFAULT_HUB_URL}), OPENENV_HUB_TOKEN, HF_ENDPOINT and HF_TOKEN for publishing.")
    top.add_argument("--hub", metavar="URL", help="the hub's URL (default: $OPENENV_HUB_URL, else "
                                                 f"{config.DEFAULT_HUB_URL})")
    commands = top.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help_text: str, fn) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("--json", action="store_true", help="print JSON (the report, the API's answer) only")
        sub.set_defaults(fn=fn)
        return sub

    check = command("check", "run the hub's checks on a package folder (in the local sandbox) or a running server",
                    cmd_check)
    check.add_argument("target", metavar="DIR|URL", help="a package folder (with openenv.yaml) or a server's URL")
    check.add_argument("--url", help="with DIR: probe this running server instead of starting one")
    check.add_argument("--strict", action="store_true", help="exit 1 on a warn verdict too")

    push = command("push", "check, publish to the Hugging Face Hub, and wait for the hub's verdict", cmd_push)
    push.add_argument("directory", metavar="DIR", nargs="?", default=".", help="the package folder (default: .)")
    push.add_argument("--repo-id", help="the Space, owner/name (default: <your HF user>/<manifest name>)")
    push.add_argument("--uploader", choices=["auto", "openenv", "huggingface_hub"], default="auto",
                      help="how to publish: `openenv push` (auto: when on PATH) or huggingface_hub")
    push.add_argument("--timeout", type=_positive, default=600.0, metavar="S",
                      help="how long to wait for the hub's verdict (default: 600 s)")
    push.add_argument("--poll-interval", type=_positive, default=2.0, metavar="S", help=argparse.SUPPRESS)
    push.add_argument("--no-check", action="store_true", help="publish without checking locally first")
    push.add_argument("--force", action="store_true", help="publish even when the local check fails")
    push.add_argument("--no-wait", action="store_true", help="ask the hub to index it, and do not wait")
    push.add_argument("--strict", action="store_true", help="a warn verdict exits 1 (and stops publishing)")

    search = command("search", "search the catalog", cmd_search)
    search.add_argument("query", metavar="QUERY", nargs="?", default="", help="words to look for (none: list all)")
    search.add_argument("--tag", action="append", default=[], help="only with this tag (repeat for any of several)")
    search.add_argument("--owner", action="append", default=[], help="only of this owner (repeatable)")
    search.add_argument("--verdict", action="append", default=[],
                        choices=["pass", "warn", "fail", "sleeping", "unvalidated"], help="only with this verdict")
    search.add_argument("--limit", type=_page_size, default=20, help="at most this many (1-200, default 20)")

    info = command("info", "one environment: its verdict, failing checks, pull forms and badge", cmd_info)
    info.add_argument("environment", metavar="OWNER/NAME")

    command("login", "store a personal token for the hub (read from stdin, or asked for without echo)", cmd_login)
    command("logout", "remove the token stored for the hub", cmd_logout)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.fn(args)
    except CliError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted.", file=sys.stderr)
        return EXIT_INTERRUPTED
