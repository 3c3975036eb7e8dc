"""The conformance probe: plays an OpenEnv server through the real protocol and reports in report-v2.

`run_validation` never raises because of what a server does (hangs, crashes,
lies, oversized or malformed answers all become failing checks with
evidence) and never runs past `ProbeConfig.deadline_s` by more than one
bounded operation. It raises only what `on_progress` raises (the caller's
cancellation) and programming errors of the caller (a check id in
`extra_results` that the policy does not know, or a duplicate).

Order of work: the static checks; /health until healthy; /schema; one /ws
session (reset, state, steps with a state after each, then a deliberately
invalid action, then close) as early as possible so that time to first work
is not inflated by the other checks; then /openapi.json, /metadata, the HTTP
mode probe and /mcp; then the graders over the recorded episode. The report
lists results in policy order.

This module keeps the order of work, the budgets and the turning of
everything into results; the work itself is in `surface` (the HTTP checks),
`episode` (the /ws player) and `graders` (the checks over the recorded episode).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Sequence

from . import graders, static
from .episode import CAPACITY_WAIT_S, Episode, EpisodeSession, fixed_actions
from .http import HostNotAllowed, ProbeClient, ProbeHTTPError
from .policy import load_policy
from .report import ERROR, FAIL, PASS, SKIP, VALIDATOR_VERSION, CheckResult, build_report, clip, json_safe
from .schema import ProbeOverloaded, invalid_action
from .static import is_number
from .surface import Surface

SOURCE_PLAN = "validation/runtime.json"
SOURCE_SYNTHESIZED = "synthesized from /schema action"
SOURCE_NONE = "none"

# Checks the caller (the runner) decides and passes in `extra_results`: only it knows what code was served.
RUNNER_CHECK_IDS = ("hub.immutable_versioning",)

RUNTIME_CHECK_IDS = (
    "runtime.startup", "hub.openapi", "hub.metadata", "hub.schema_endpoint", "hub.http_mode",
    "hub.mcp_endpoint", "hub.mcp_tools", "runtime.tool_declaration_accuracy", "hub.ws_episode",
    "runtime.observation_schema", "runtime.reward_well_formed", "runtime.state_contract",
    "hub.invalid_action", "hub.time_to_first_work",
)


@dataclass(frozen=True)
class ProbeTarget:
    """Where the server answers: a base URL, optionally over a Unix socket, and the hosts it may be on."""

    base_url: str
    uds: str | None = None
    allowed_hosts: tuple[str, ...] = ("*.hf.space",)


@dataclass(frozen=True)
class ProbeConfig:
    """Budgets of one run. Every wait is bounded by `check_timeout_s` and the whole run by `deadline_s`."""

    check_timeout_s: float = 15.0
    deadline_s: float = 180.0
    startup_timeout_s: float = 120.0
    episode_timeout_s: float = 60.0
    max_body_bytes: int = 1024 * 1024
    steps: int = 5
    seed: int = 0
    episode_id: str = "openenv-hub-probe"
    time_to_first_work_budget_s: float = 60.0
    poll_interval_s: float = 0.5
    capacity_wait_s: float = CAPACITY_WAIT_S
    schema_timeout_s: float = 30.0
    # Exceptions that end the whole run instead of becoming one check's error (e.g. a task's time limit).
    passthrough: tuple[type[BaseException], ...] = ()


class _Cancelled(BaseException):
    """Carries what on_progress raised past every check's exception handler."""

    def __init__(self, original: BaseException):
        super().__init__(repr(original))
        self.original = original


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(q * len(ordered)) - 1)], 4)


class _Run:
    def __init__(
        self, *, target: ProbeTarget, config: ProbeConfig, manifest: dict | None, plan: dict | None,
        plan_present: bool, source: dict, on_progress: Callable[[str], None] | None,
        started_at: float | None,
    ):
        self.target = target
        self.config = config
        self.manifest = manifest
        self.plan = plan
        self.plan_present = plan_present
        self.source = source
        self.on_progress = on_progress
        self.started_at = started_at
        self.t0 = time.monotonic()
        self.deadline = self.t0 + config.deadline_s
        self.results: list[CheckResult] = []
        self.client: ProbeClient | None = None
        self.ws: EpisodeSession | None = None
        self.actions: list = []  # what the episode was given to play
        self.surface: Surface | None = None

    @property
    def episode(self) -> Episode | None:
        return self.ws.episode if self.ws is not None else None

    # ---- plumbing -----------------------------------------------------------

    def progress(self, check_id: str) -> None:
        if self.on_progress is not None:
            try:
                self.on_progress(check_id)
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller untouched
                raise _Cancelled(exc) from None

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def budget(self, *limits: float | None) -> float:
        """Time allowed for the next operation: the check timeout, the run deadline and any extra limit."""
        values = [self.config.check_timeout_s, self.remaining(), *[v for v in limits if v is not None]]
        return max(0.0, min(values))

    def schema_budget(self) -> float:
        """Wall-clock time for one sandboxed schema evaluation; its CPU is capped separately."""
        return max(0.5, min(self.config.schema_timeout_s, self.remaining()))

    def origin(self) -> float:
        if self.started_at is not None:
            return self.started_at
        first = self.surface.first_request_at if self.surface is not None else None
        return first if first is not None else self.t0

    def run(self, check_id: str, fn: Callable[[], CheckResult]) -> CheckResult:
        self.progress(check_id)
        if self.remaining() <= 0:
            return self.record(self.deadline_result(check_id))
        started = time.monotonic()
        try:
            result = fn()
        except _Cancelled:
            raise
        except ProbeOverloaded as exc:
            if self.remaining() <= 0:
                result = self.deadline_result(check_id, during=True)
            else:
                result = CheckResult(check_id, ERROR, {}, [str(exc)],
                                     "Nothing to change in the environment: run the probe again.")
        except ProbeHTTPError as exc:
            result = CheckResult(
                check_id, FAIL, {}, [str(exc)],
                "Answer every request within the probe's timeout, with a response under its size cap.",
            )
        except Exception as exc:  # noqa: BLE001 - a probe bug or an unforeseen answer fails closed
            if isinstance(exc, self.config.passthrough):
                raise _Cancelled(exc) from None
            result = CheckResult(check_id, ERROR, {}, [f"the probe failed on this check: {type(exc).__name__}: {exc}"])
        if result.check_id != check_id:
            raise AssertionError(f"{check_id} produced a result for {result.check_id}")
        result.duration_s = time.monotonic() - started
        return self.record(result)

    def deadline_result(self, check_id: str, *, during: bool = False) -> CheckResult:
        when = "during" if during else "before"
        return CheckResult(
            check_id, ERROR, {"deadline_s": self.config.deadline_s},
            [f"deadline reached {when} this check ({self.config.deadline_s:g} s for the whole run)"],
            "The server was too slow for the probe's deadline; make startup and each reply faster.",
        )

    def skip(self, check_id: str, reason: str) -> CheckResult:
        self.progress(check_id)
        if self.remaining() <= 0:
            # Not reached in time: fail closed rather than let a slow server off with a warn.
            return self.record(self.deadline_result(check_id))
        return self.record(CheckResult(check_id, SKIP, {}, [reason]))

    def record(self, result: CheckResult) -> CheckResult:
        self.results.append(result)
        return result

    # ---- the run ------------------------------------------------------------

    def execute(self) -> None:
        try:
            self.client = ProbeClient(
                self.target.base_url, allowed_hosts=self.target.allowed_hosts, uds=self.target.uds,
                max_body_bytes=self.config.max_body_bytes, user_agent=VALIDATOR_VERSION,
            )
        except HostNotAllowed as exc:
            refused = str(exc)
            self.run("runtime.startup", lambda: CheckResult(
                "runtime.startup", ERROR, {"base_url": self.target.base_url, "allowed_hosts": list(self.target.allowed_hosts)},
                [refused], "Probe only the environment's own Space host (or the local runner's socket).",
            ))
            self.skip_rest("unmet dependency: runtime.startup (target refused)")
            return
        surface = self.surface = Surface(self.client, self)
        try:
            self.run("runtime.startup", partial(
                surface.check_startup, timeout_s=self.config.startup_timeout_s,
                poll_interval_s=self.config.poll_interval_s, runner=self.source.get("runner"),
            ))
            if not surface.reachable:
                self.skip_rest("unmet dependency: runtime.startup (the server never answered HTTP)")
                return
            self.run("hub.schema_endpoint", partial(surface.check_schema, synthesize=self.plan is None))
            self.run("hub.ws_episode", self.check_ws_episode)
            if self.episode is not None and self.episode.usable and self.episode.first_reset_at is not None:
                self.run("hub.invalid_action", self.check_invalid_action)
            else:
                why = (self.episode.failure_short if self.episode else None) or "no session"
                self.skip("hub.invalid_action", f"unmet dependency: hub.ws_episode (session unusable: {why})")
            self.close_session()
            self.run("hub.openapi", surface.check_openapi)
            self.run("hub.metadata", surface.check_metadata)
            self.run("hub.http_mode", surface.check_http_mode)
            self.run("hub.mcp_endpoint", surface.check_mcp_endpoint)
            if surface.mcp is True:
                self.run("hub.mcp_tools", surface.check_mcp_tools)
            elif surface.mcp is None:
                self.skip("hub.mcp_tools", "unmet dependency: hub.mcp_endpoint")
            # mcp is False: not an MCP environment, so the tool checks do not apply and are not reported.
            if self.declared_tools():
                if surface.mcp is None:
                    self.skip("runtime.tool_declaration_accuracy", "unmet dependency: hub.mcp_endpoint")
                else:
                    self.run("runtime.tool_declaration_accuracy",
                             partial(surface.check_tool_declaration, self.declared_tools()))
            for check_id, fn in (
                ("runtime.observation_schema",
                 lambda: graders.observation_schema(self.episode, surface.schema, timeout_s=self.schema_budget())),
                ("runtime.reward_well_formed", lambda: graders.reward_well_formed(self.episode, self.manifest)),
                ("runtime.state_contract", lambda: graders.state_contract(self.episode)),
            ):
                reason = self.episode_unmet()
                if check_id == "runtime.observation_schema" and not reason and not surface.schema_ok:
                    reason = "unmet dependency: hub.schema_endpoint (no usable /schema)"
                if reason:
                    self.skip(check_id, reason)
                else:
                    self.run(check_id, fn)
            self.run("hub.time_to_first_work", self.grade_time_to_first_work)
        finally:
            self.close_session()
            self.client.close()

    def skip_rest(self, reason: str) -> None:
        done = {r.check_id for r in self.results}
        for check_id in RUNTIME_CHECK_IDS:
            if check_id in done or check_id == "hub.mcp_tools":
                continue
            if check_id == "runtime.tool_declaration_accuracy" and not self.declared_tools():
                continue
            self.skip(check_id, reason)

    def declared_tools(self) -> list[str]:
        block = static.validation_block(self.manifest)
        capabilities = block.get("capabilities") if isinstance(block, dict) else None
        tools = capabilities.get("declared_tools") if isinstance(capabilities, dict) else None
        return [t for t in tools if isinstance(t, str)] if isinstance(tools, list) else []

    def episode_unmet(self) -> str | None:
        episode = self.episode
        if episode is None or episode.first_reset_at is None:
            why = episode.failure_short if episode and episode.failure_short else "no reset observation"
            return f"unmet dependency: hub.ws_episode ({why})"
        if episode.steps_ok == 0:
            if episode.failure_short:
                return f"no step observation to grade (hub.ws_episode: {episode.failure_short})"
            if not self.actions:
                return "no step observation to grade: no validation/runtime.json and no usable /schema to build an action"
            return "no step observation to grade (the episode ended at reset)"
        return None

    # ---- the WebSocket episode ----------------------------------------------

    def plan_actions(self) -> tuple[dict, list, str, list[str]]:
        notes = []
        if self.plan is not None:
            reset = dict(self.plan["reset"].get("options") or {})
            reset.update(seed=self.plan["reset"]["seed"], episode_id=self.plan["reset"]["episode_id"])
            return reset, list(self.plan["actions"]), SOURCE_PLAN, notes
        if self.plan_present:
            notes.append("validation/runtime.json is not a valid plan (see hub.runtime_plan); actions were synthesized")
        reset = {"seed": self.config.seed, "episode_id": self.config.episode_id}
        synth = self.surface.synth
        action = synth[0] if synth else None
        if action is not None:
            if synth[2]:
                notes.append(f"the synthesized action does not fully satisfy the action schema: {synth[2][0]}")
            notes += synth[1][:3]
            return reset, [action] * max(1, self.config.steps), SOURCE_SYNTHESIZED, notes
        notes.append("no action source: no valid validation/runtime.json and no usable /schema action; no step was played")
        return reset, [], SOURCE_NONE, notes

    def check_ws_episode(self) -> CheckResult:
        cid = "hub.ws_episode"
        reset_data, actions, source, notes = self.plan_actions()
        self.actions = actions
        self.ws = EpisodeSession(self.client, budget=self.budget)
        episode = self.ws.play(
            fixed_actions(actions), reset_data=reset_data, deadline=time.monotonic() + self.config.episode_timeout_s,
            capacity_wait_s=self.config.capacity_wait_s, on_progress=partial(self.progress, cid),
        )
        steps = [e for e in episode.exchanges if e.op == "step" and not e.reply.problem and not e.reply.is_error_frame]
        resets = [e for e in episode.exchanges if e.op == "reset"]
        latencies = [e.reply.latency_s for e in steps]
        measured = {
            "action_source": source,
            "reset": reset_data,
            "actions_available": len(actions),
            "steps_played": episode.steps_ok,
            "states": sum(1 for e in episode.exchanges if e.op == "state"),
            "done": episode.done,
            "capacity_retries": episode.capacity_retries,
            "reset_latency_s": round(resets[0].reply.latency_s, 4) if resets and not resets[0].reply.problem else None,
            "step_latency_s": {"n": len(latencies), "p50": _percentile(latencies, 0.5),
                               "p95": _percentile(latencies, 0.95), "max": _percentile(latencies, 1.0)},
        }
        if source == SOURCE_SYNTHESIZED:
            measured["synthesized_action"] = actions[0]
        problems = ([episode.failure] if episode.failure else []) + episode.envelope_problems
        if resets and resets[0].reply.error_code == "CAPACITY_REACHED":
            # Someone else holds the server's only session: nothing the probe can judge.
            return CheckResult(
                cid, ERROR, measured,
                [f"{episode.failure_short}; the server's only /ws session stayed taken for "
                 f"{self.config.capacity_wait_s:g} s (another client is connected)", *notes],
                "Nothing to change for conformance; run the probe again when the session is free "
                "(or allow more sessions with max_concurrent_envs).",
            )
        if problems:
            return CheckResult(
                cid, FAIL, measured, [*problems, *notes],
                "Answer every /ws frame in time with {\"type\": \"observation\"|\"state\", \"data\": {...}} as "
                "create_app's /ws does; make reset and step succeed for valid actions "
                + ("(the actions come from validation/runtime.json)." if source == SOURCE_PLAN
                   else "(add validation/runtime.json with actions that suit your environment)."),
            )
        ending = "ended (done)" if episode.done else "still running"
        return CheckResult(cid, PASS, measured, [
            f"reset + {episode.steps_ok} step(s) + {measured['states']} state(s) on one /ws session; "
            f"actions {source}; episode {ending}", *notes,
        ])

    def check_invalid_action(self) -> CheckResult:
        cid = "hub.invalid_action"
        action_schema = self.surface.schema.get("action") if isinstance(self.surface.schema, dict) else None
        payload, why = invalid_action(action_schema)
        end = time.monotonic() + self.config.check_timeout_s
        progress = partial(self.progress, cid)
        record = self.ws.exchange("invalid", "invalid action", {"type": "step", "data": payload},
                                  deadline=end, on_progress=progress)
        reply = record.reply
        measured = {"sent": payload, "why_invalid": why, "reply_code": reply.error_code}
        remediation = ("Validate actions against the action model and answer a bad one with an error frame "
                       "{\"type\": \"error\", \"data\": {\"code\": \"VALIDATION_ERROR\", ...}}, keeping the session open.")
        sent = f"step with {why} ({clip(payload, 80)})"
        if reply.problem:
            return CheckResult(cid, FAIL, measured, [f"{sent}: {reply.problem}"], remediation)
        if not reply.is_error_frame:
            return CheckResult(cid, FAIL, measured,
                               [f"{sent} was accepted: {reply.describe(120)}"], remediation)
        if reply.error_code != "VALIDATION_ERROR":
            return CheckResult(cid, FAIL, measured,
                               [f"{sent} -> error code {reply.error_code!r}, expected 'VALIDATION_ERROR'"], remediation)
        after, alive = self.ws.answers_state("state_after_invalid", "state after the invalid action",
                                             deadline=end, on_progress=progress)
        measured["session_answers_after"] = alive
        if not alive:
            return CheckResult(cid, FAIL, measured,
                               [f"{sent} -> VALIDATION_ERROR, but then state got: {after.reply.describe(100)}"], remediation)
        return CheckResult(cid, PASS, measured, [f"{sent} -> VALIDATION_ERROR; the session still answers state"])

    def close_session(self) -> None:
        if self.ws is not None:
            self.ws.close()

    # ---- graders over the recorded episode (graders.py) ----------------------

    def grade_time_to_first_work(self) -> CheckResult:
        return graders.time_to_first_work(
            origin=self.origin(), origin_kind="process_start" if self.started_at is not None else "first_request",
            healthy_at=self.surface.healthy_at, first_reset_at=self.episode.first_reset_at if self.episode else None,
            budget_s=self.config.time_to_first_work_budget_s,
        )


def _target_string(target: ProbeTarget, source: dict) -> str:
    repo_id, sha = source.get("repo_id"), source.get("sha")
    where = repo_id or target.base_url
    return f"{where}@{sha}" if sha else str(where)


# What a catalog shows of a server besides its report: public output of untrusted code, so cleaned and capped.
MAX_OBSERVED_SCHEMAS_BYTES = 64 * 1024
MAX_OBSERVED_TOOLS_BYTES = 64 * 1024
MAX_TRANSCRIPT_FRAMES = 24
MAX_TRANSCRIPT_FRAME_CHARS = 2000


def _bounded(value: Any, limit: int) -> Any:
    """Plain JSON of `value` if it fits in `limit` bytes serialized, else None."""
    safe = json_safe(value)
    return safe if len(json.dumps(safe, ensure_ascii=False)) <= limit else None


def _frame_text(value: Any) -> str:
    text = json.dumps(json_safe(value), ensure_ascii=False, sort_keys=False)
    return text if len(text) <= MAX_TRANSCRIPT_FRAME_CHARS else text[:MAX_TRANSCRIPT_FRAME_CHARS - 1] + "…"


def observations(run: _Run) -> dict:
    """What the server showed: `schemas` (its /schema, when valid and small), `tools` (its MCP tools, likewise)
    and `episode` (the reset, each action sent and each reply on the one /ws session, as JSON text cut to a sane
    size, first frames first). Meant to be shown to people as inert text."""
    surface = run.surface
    out: dict[str, Any] = {"schemas": None, "tools": None, "episode": []}
    if surface is not None:
        if surface.schema_ok and isinstance(surface.schema, dict):
            out["schemas"] = _bounded(surface.schema, MAX_OBSERVED_SCHEMAS_BYTES)
        if surface.mcp and isinstance(surface.tools, list):
            out["tools"] = _bounded(surface.tools[:100], MAX_OBSERVED_TOOLS_BYTES)
    episode = run.episode
    for record in (episode.exchanges if episode else [])[:MAX_TRANSCRIPT_FRAMES]:
        if record.op not in ("reset", "step", "state"):
            continue  # the deliberately invalid action and its aftermath are the report's business
        reply = record.reply
        item: dict[str, Any] = {"op": record.op, "label": record.label}
        if record.op == "step" and isinstance(reply.sent, dict):
            item["sent"] = _frame_text(reply.sent.get("data"))
        data = reply.data if isinstance(reply.data, dict) else None
        if reply.problem:
            item["problem"] = clip(reply.problem, 300)
        elif record.op in ("reset", "step") and data is not None and not reply.is_error_frame:
            item["observation"] = _frame_text(data.get("observation"))
            reward = data.get("reward")
            item["reward"] = reward if is_number(reward) and math.isfinite(reward) else None
            item["done"] = data.get("done") is True
        else:
            item["received"] = _frame_text(reply.frame)
        out["episode"].append(item)
    return out


def run_validation(
    target: ProbeTarget,
    *,
    manifest: dict | None,
    files: list[dict],
    openenv_requirement: str,
    runtime_plan: bytes | None,
    source: dict,
    config: ProbeConfig = ProbeConfig(),
    extra_results: Sequence[CheckResult] = (),
    on_progress: Callable[[str], None] | None = None,
    started_at: float | None = None,
    manifest_problems: Sequence[str] = (),
    observed: dict | None = None,
    with_static: bool = True,
) -> dict:
    """Probe one running environment and return its report (OpenEnv report-v2, lane "hub", policy hub-1).

    `with_static=False` leaves out the static checks (a server whose package is not at hand, as in
    `openenv-hub check URL`): the report then has only the runtime checks, and `extra_results`.

    `observed`, when given, is filled with what the server showed beyond the report (see `observations`):
    its schemas, its MCP tools and a transcript of the episode played.

    `source` binds the result to a revision: {"sha", "repo_id", "runner"};
    `target` of the report is "repo_id@sha" and `source_digest` the sha.
    `on_progress(check_id)` is called before each check (and again between
    polls and episode frames of long checks); whatever it raises is raised
    from here after the connections are closed. `started_at` is
    time.monotonic() at server start, the origin of hub.time_to_first_work.
    """
    policy = load_policy()
    source = dict(source or {})
    plan, _ = static.parse_runtime_plan(runtime_plan) if runtime_plan is not None else (None, None)
    run = _Run(
        target=target, config=config, manifest=manifest, plan=plan, plan_present=runtime_plan is not None,
        source=source, on_progress=on_progress, started_at=started_at,
    )
    try:
        if with_static:
            run.run("static.manifest", lambda: static.check_manifest(manifest, list(manifest_problems), policy))
            run.run("static.layout", lambda: static.check_layout(manifest, files))
            run.run("hub.openenv_dependency",
                    lambda: static.check_openenv_dependency(openenv_requirement, files))
            run.run("hub.runtime_plan", lambda: static.check_runtime_plan(manifest, runtime_plan))
        run.execute()
    except _Cancelled as cancelled:
        raise cancelled.original from None
    if observed is not None:
        observed.update(observations(run))
    normalized, _ = static.normalize_manifest(manifest)
    return build_report(
        results=[*run.results, *extra_results],
        target=_target_string(target, source),
        source_digest=str(source.get("sha") or ""),
        manifest=normalized,
        policy=policy,
    )


def report_without_runtime(
    *,
    manifest: dict | None,
    files: list[dict],
    openenv_requirement: str,
    runtime_plan: bytes | None,
    source: dict,
    failure: CheckResult,
    extra_results: Sequence[CheckResult] = (),
    manifest_problems: Sequence[str] = (),
) -> dict:
    """The report of an environment that could not be reached at all (it did not install, start or build).

    The static checks still run; `failure` (usually a failing `runtime.startup`)
    says why nothing else could; every other runtime check is skipped with that reason.
    """
    policy = load_policy()
    results = static.static_checks(
        manifest=manifest, manifest_problems=list(manifest_problems), files=files,
        openenv_requirement=openenv_requirement, runtime_plan=runtime_plan, policy=policy,
    )
    results.append(failure)
    for check_id in RUNTIME_CHECK_IDS:
        if check_id != failure.check_id and check_id not in {r.check_id for r in extra_results}:
            results.append(CheckResult(check_id, SKIP, evidence=[f"not run: {failure.check_id} failed"]))
    normalized, _ = static.normalize_manifest(manifest)
    return build_report(
        results=[*results, *extra_results],
        target=_target_string(ProbeTarget(""), source),
        source_digest=str(source.get("sha") or ""),
        manifest=normalized,
        policy=policy,
    )
