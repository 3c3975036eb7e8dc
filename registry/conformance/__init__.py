"""Conformance probing of OpenEnv environments: pure Python, no Django.

    from registry.conformance import ProbeTarget, ProbeConfig, run_validation
    report = run_validation(
        ProbeTarget("https://openenv-echo-env.hf.space"),
        manifest=revision.manifest, files=revision.files,
        openenv_requirement=revision.openenv_requirement, runtime_plan=plan_bytes,
        source={"sha": revision.sha, "repo_id": "openenv/echo_env", "runner": "space"},
        on_progress=heartbeat,
    )
    report["verdict"]  # "pass" | "warn" | "fail"

The report is OpenEnv's report-v2 (lane "hub", policy "hub-1"); the policy
(`policy.json`) lists every check id with its level, lane and severity.

Episodes over /ws without a report (evaluations, replays) go through the
episode player, with any policy:

    from registry.conformance import ProbeClient, fixed_actions, play_episode
    episode = play_episode(ProbeClient(url, allowed_hosts=("*.hf.space",)), fixed_actions(actions),
                           reset_data={"seed": 0}, deadline=time.monotonic() + 60)
"""

from .episode import Episode, EpisodeSession, Exchange, fixed_actions, play_episode
from .http import BodyTooLarge, HostNotAllowed, ProbeClient, ProbeHTTPError, host_allowed
from .policy import POLICY_VERSION, Policy, PolicyEntry, PolicyError, load_policy
from .probe import ProbeConfig, ProbeTarget, report_without_runtime, run_validation
from .report import (
    ERROR,
    FAIL,
    PASS,
    REPORT_SCHEMA_VERSION,
    SKIP,
    VALIDATOR_VERSION,
    CheckResult,
    build_report,
    report_problems,
    report_schema,
    verdict,
)
from .schema import invalid_action, synthesize_action
from .static import (
    MAX_PLAN_BYTES,
    normalize_manifest,
    parse_runtime_plan,
    reward_range,
    runtime_plan_path,
    static_checks,
)

__all__ = [
    "MAX_PLAN_BYTES",
    "ERROR",
    "POLICY_VERSION",
    "FAIL",
    "PASS",
    "REPORT_SCHEMA_VERSION",
    "SKIP",
    "VALIDATOR_VERSION",
    "BodyTooLarge",
    "CheckResult",
    "Episode",
    "EpisodeSession",
    "Exchange",
    "HostNotAllowed",
    "Policy",
    "PolicyEntry",
    "PolicyError",
    "ProbeClient",
    "ProbeConfig",
    "ProbeHTTPError",
    "ProbeTarget",
    "build_report",
    "fixed_actions",
    "host_allowed",
    "invalid_action",
    "load_policy",
    "normalize_manifest",
    "parse_runtime_plan",
    "play_episode",
    "report_problems",
    "report_schema",
    "report_without_runtime",
    "reward_range",
    "run_validation",
    "runtime_plan_path",
    "static_checks",
    "synthesize_action",
    "verdict",
]
