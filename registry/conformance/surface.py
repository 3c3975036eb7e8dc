"""The HTTP surface of an OpenEnv server: /health, /schema, /openapi.json, /metadata, the HTTP mode and /mcp.

`Surface` holds one check per method (PROTOCOL §1.1, §1.4, §1.5) and keeps
what later checks depend on: whether the server answered HTTP at all, when it
became healthy, the /schema body, the OpenAPI paths, whether /mcp speaks MCP
and its tools. Invariant: every request goes through `ProbeClient` (allowed
hosts, byte caps, no redirects) within the run's budget, and nothing here
plays the environment over HTTP (the mode is read from 404 vs 405 on methods
the routes do not serve; episodes are played on /ws, see episode.py). A
`ProbeHTTPError` that a check lets escape is the run's to turn into a
failing result.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from .http import ProbeClient, ProbeHTTPError, Response, snippet
from .report import FAIL, PASS, VALIDATOR_VERSION, CheckResult, clip
from .schema import SchemaWorkerError, evaluate, remote_refs, schema_errors, synthesize_action

RESERVED_TOOL_NAMES = ("reset", "step", "state", "close")
HEALTH_POLL_TIMEOUT_S = 5.0


class Run(Protocol):
    """What the checks use of the run calling them (the probe's): its clock, budgets and progress hook."""

    t0: float
    deadline: float

    def progress(self, check_id: str) -> None: ...

    def remaining(self) -> float: ...

    def budget(self, *limits: float | None) -> float: ...

    def schema_budget(self) -> float: ...

    def origin(self) -> float: ...

    def deadline_result(self, check_id: str, *, during: bool = False) -> CheckResult: ...


class Surface:
    """The HTTP checks of one server, in any order the run likes, and what they learned."""

    def __init__(self, client: ProbeClient, run: Run):
        self.client = client
        self.run = run
        self.first_request_at: float | None = None  # time to first work counts from here when the start is unknown
        self.reachable = False
        self.healthy_at: float | None = None
        self.schema: dict | None = None
        self.schema_ok = False
        self.synth: tuple[dict | None, list[str], list[str]] | None = None  # action, notes, schema errors
        self.openapi_paths: dict | None = None
        self.mcp: bool | None = None
        self.tools: list | None = None

    def get(self, path: str, *, timeout_s: float | None = None) -> Response:
        """GET within the run's budget and `timeout_s`; the first one is time to first work's fallback origin."""
        if self.first_request_at is None:
            self.first_request_at = time.monotonic()
        return self.client.request("GET", path, timeout_s=self.run.budget(timeout_s))

    def post(self, path: str, body: Any) -> Response:
        """POST `body` as JSON within the run's budget."""
        return self.client.request("POST", path, timeout_s=self.run.budget(), json_body=body)

    def check_startup(self, *, timeout_s: float, poll_interval_s: float, runner: Any) -> CheckResult:
        """runtime.startup: poll /health until it says healthy, for at most `timeout_s`; `runner` is reported."""
        cid = "runtime.startup"
        end = min(self.run.deadline, time.monotonic() + timeout_s)
        attempts, last, app_up_evidence = 0, "no answer", None
        measured: dict[str, Any] = {
            "base_url": self.client.base_url, "transport": "uds" if self.client.uds else "tcp",
            "runner": runner, "validator_version": VALIDATOR_VERSION,
        }
        while True:
            self.run.progress(cid)
            attempts += 1
            try:
                response = self.get("/health", timeout_s=min(HEALTH_POLL_TIMEOUT_S, end - time.monotonic()))
            except ProbeHTTPError as exc:
                last = str(exc)
            else:
                self.reachable = True
                try:
                    body = response.json()
                except ProbeHTTPError:
                    body = None
                if response.status == 200 and isinstance(body, dict) and body.get("status") == "healthy":
                    self.healthy_at = time.monotonic()
                    measured.update(attempts=attempts, time_to_healthy_s=round(self.healthy_at - self.run.origin(), 3))
                    return CheckResult(cid, PASS, measured, [f"GET /health -> 200 {snippet(response.body, 80)} "
                                                             f"after {attempts} attempt(s)"])
                last = response.describe()
                if response.is_redirect:
                    break
                # A proxy in front of a starting Space also answers non-healthy; only
                # stop waiting when the app itself is clearly up and /health still says no.
                app_up_evidence = self.app_is_up()
                if app_up_evidence:
                    break
            if time.monotonic() + poll_interval_s >= end:
                break
            time.sleep(poll_interval_s)
        measured.update(attempts=attempts, waited_s=round(time.monotonic() - self.run.t0, 3))
        if not self.reachable and self.run.remaining() <= 0:
            result = self.run.deadline_result(cid, during=True)
            result.measured.update(measured)
            result.evidence.append(last)
            return result
        evidence = [last]
        if app_up_evidence:
            evidence.append(f"{app_up_evidence}, so the app is up and /health is not healthy")
        elif not self.reachable:
            evidence.append(f"no HTTP answer from {self.client.base_url} in {attempts} attempt(s) "
                            f"over {time.monotonic() - self.run.t0:.1f} s")
        return CheckResult(
            cid, FAIL, measured, evidence,
            "Serve GET /health with 200 {\"status\": \"healthy\"} once the app can take requests (the stock "
            "create_app route does); make sure the server starts within the startup budget.",
        )

    def app_is_up(self) -> str | None:
        """Evidence that the app itself answers (a real OpenAPI document), or None."""
        try:
            response = self.get("/openapi.json", timeout_s=HEALTH_POLL_TIMEOUT_S)
            body = response.json() if response.status == 200 else None
        except ProbeHTTPError:
            return None
        if isinstance(body, dict) and isinstance(body.get("paths"), dict):
            return "GET /openapi.json -> 200"
        return None

    def json_object(self, cid: str, path: str, remediation: str, *, payload: dict | None = None
                    ) -> tuple[Any, dict | None, CheckResult | None]:
        """GET (or POST `payload` to) `path` and parse a JSON object: (response, body, None) or the failing result."""
        response = self.get(path) if payload is None else self.post(path, payload)
        if response.status != 200:
            return response, None, CheckResult(cid, FAIL, {"status": response.status}, [response.describe()], remediation)
        try:
            body = response.json()
        except ProbeHTTPError as exc:
            return response, None, CheckResult(cid, FAIL, {"status": response.status}, [str(exc)], remediation)
        if not isinstance(body, dict):
            return response, None, CheckResult(
                cid, FAIL, {}, [f"{path} is not a JSON object: {snippet(response.body, 80)}"], remediation)
        return response, body, None

    def check_openapi(self) -> CheckResult:
        """hub.openapi: /openapi.json is an OpenAPI document with info.version and paths (kept for hub.http_mode)."""
        cid = "hub.openapi"
        remediation = "Serve FastAPI's OpenAPI document at /openapi.json (create_app does)."
        _, body, failed = self.json_object(cid, "/openapi.json", remediation)
        if failed:
            return failed
        info = body.get("info")
        version = info.get("version") if isinstance(info, dict) else None
        paths = body.get("paths")
        problems = []
        if not isinstance(version, str):
            problems.append("the document has no info.version string")
        if not isinstance(paths, dict):
            problems.append("the document has no paths object")
        else:
            self.openapi_paths = paths
        measured = {"info_version": version if isinstance(version, str) else None,
                    "paths": len(paths) if isinstance(paths, dict) else None}
        if problems:
            return CheckResult(cid, FAIL, measured, problems, remediation)
        return CheckResult(cid, PASS, measured, [f"info.version {version!r}, {len(paths)} paths"])

    def check_metadata(self) -> CheckResult:
        """hub.metadata: /metadata names and describes the environment."""
        cid = "hub.metadata"
        remediation = "Serve /metadata with a name and a description (override get_metadata() in the environment)."
        response, body, failed = self.json_object(cid, "/metadata", remediation)
        if failed:
            return failed
        name, description = body.get("name"), body.get("description")
        measured = {key: body.get(key) for key in ("name", "description", "version") if isinstance(body.get(key), str)}
        problems = []
        if not isinstance(name, str) or not name.strip():
            problems.append(f"/metadata has no name: {snippet(response.body, 120)}")
        if not isinstance(description, str) or not description.strip():
            problems.append(f"/metadata has no description: {snippet(response.body, 120)}")
        if problems:
            return CheckResult(cid, FAIL, measured, problems, remediation)
        return CheckResult(cid, PASS, measured, [f"name {name!r}, description {clip(description, 80)!r}"])

    def check_schema(self, *, synthesize: bool) -> CheckResult:
        """hub.schema_endpoint: /schema has valid action, observation and state schemas; with `synthesize`,
        builds an action from the action schema and checks it in the schema sandbox (see `synth`)."""
        cid = "hub.schema_endpoint"
        remediation = ("Serve /schema with the action, observation and state JSON Schemas "
                       "(create_app does, from the pydantic models).")
        response, body, failed = self.json_object(cid, "/schema", remediation)
        if failed:
            return failed
        problems = [f"/schema has no {key} object" for key in ("action", "observation", "state")
                    if not isinstance(body.get(key), dict)]
        if body.get("reset_observation") is not None and not isinstance(body.get("reset_observation"), dict):
            problems.append("/schema reset_observation is not an object")
        parts = [k for k in ("action", "observation", "state", "reset_observation") if isinstance(body.get(k), dict)]
        for key in parts:
            refs = remote_refs(body[key])
            if refs:
                problems.append(f"{key} schema has non-local references {refs} (never fetched)")
        for key in parts:
            problems += [f"{key} is not a valid JSON Schema: {error}" for error in schema_errors(body[key])]
        if isinstance(body.get("action"), dict) and synthesize:
            action, notes = synthesize_action(body["action"])
            self.synth = (action, notes, [])
            if action is not None and not problems:
                # Whether the action satisfies the schema means matching the environment's patterns: sandboxed.
                try:
                    entry = evaluate([{"id": "a", "op": "validate", "schema": body["action"], "instances": [action]}],
                                     timeout_s=self.run.schema_budget()).get("a", {})
                    errors = (entry.get("results") or [[]])[0] or ([entry["failed"]] if entry.get("failed") else [])
                except SchemaWorkerError as exc:
                    errors = [str(exc)]
                self.synth = (action, notes, errors)
        self.schema = body
        self.schema_ok = not problems
        measured = {"keys": sorted(body)[:20]}
        if problems:
            return CheckResult(cid, FAIL, measured, problems, remediation)
        return CheckResult(cid, PASS, measured, [f"{', '.join(parts)}: valid JSON Schemas"])

    def check_http_mode(self) -> CheckResult:
        """hub.http_mode: HTTP /reset, /step and /state are all served (simulation) or none (production)."""
        cid = "hub.http_mode"
        # A method the route does not serve: FastAPI answers 405 when the path
        # exists and 404 when it does not, without running environment code.
        probes = (("/reset", "GET"), ("/step", "GET"), ("/state", "POST"))
        live: dict[str, bool | None] = {}
        seen = []
        for path, method in probes:
            try:
                response = self.client.request(method, path, timeout_s=self.run.budget())
            except ProbeHTTPError as exc:
                live[path] = None
                seen.append(f"{method} {path}: {exc}")
                continue
            live[path] = None if response.is_redirect else response.status != 404
            seen.append(f"{method} {path} -> {response.status}")
        documented = {p: p in self.openapi_paths for p, _ in probes} if self.openapi_paths is not None else None
        present = {p: (live[p] if live[p] is not None else (documented or {}).get(p)) for p, _ in probes}
        measured: dict[str, Any] = {"live": live, "openapi": documented}
        notes = []
        if documented is not None and any(live[p] is not None and live[p] != documented[p] for p, _ in probes):
            notes.append("the OpenAPI document disagrees with the routes served: "
                         + ", ".join(f"{p} {'documented' if documented[p] else 'undocumented'}"
                                     for p, _ in probes if live[p] is not None and live[p] != documented[p]))
        if any(v is None for v in present.values()):
            measured["mode"] = "unknown"
            return CheckResult(cid, FAIL, measured, [*seen, *notes],
                               "Answer plain HTTP on /reset, /step and /state (405 or 404), without redirects.")
        served = [p for p, v in present.items() if v]
        if len(served) == 3 or not served:
            measured["mode"] = "simulation" if served else "production"
            summary = ("simulation mode: /reset, /step and /state are served" if served
                       else "production mode: no HTTP /reset, /step or /state")
            return CheckResult(cid, PASS, measured, [f"{summary} ({'; '.join(seen)})", *notes])
        measured["mode"] = "inconsistent"
        absent = [p for p, v in present.items() if not v]
        return CheckResult(
            cid, FAIL, measured,
            [f"inconsistent: {', '.join(served)} served but {', '.join(absent)} absent ({'; '.join(seen)})", *notes],
            "Serve all of POST /reset, POST /step and GET /state (OPENENV_MODE=simulation) or none of them "
            "(production); do not remove some of create_app's routes.",
        )

    def check_mcp_endpoint(self) -> CheckResult:
        """hub.mcp_endpoint: POST /mcp answers tools/list with tools, or says the environment is not MCP."""
        cid = "hub.mcp_endpoint"
        remediation = "Keep create_app's POST /mcp: JSON-RPC 2.0, answering tools/list (or -32603 for a non-MCP environment)."
        request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        response, body, failed = self.json_object(cid, "/mcp", remediation, payload=request)
        if failed:
            return failed
        if body.get("jsonrpc") != "2.0":
            return CheckResult(cid, FAIL, {}, [f"tools/list -> not JSON-RPC 2.0: {snippet(response.body, 120)}"], remediation)
        result, error = body.get("result"), body.get("error")
        if isinstance(result, dict) and isinstance(result.get("tools"), list):
            self.mcp, self.tools = True, result["tools"]
            return CheckResult(cid, PASS, {"mcp": True, "tools": len(self.tools)},
                               [f"tools/list -> {len(self.tools)} tool(s)"])
        if isinstance(error, dict):
            code, message = error.get("code"), str(error.get("message", ""))
            if code == -32603 and "does not support MCP" in message:
                self.mcp = False
                return CheckResult(cid, PASS, {"mcp": False},
                                   [f"not an MCP environment: tools/list -> {code} {message!r}; MCP tool checks do not apply"])
            return CheckResult(cid, FAIL, {"error_code": code},
                               [f"tools/list -> error {code}: {clip(message, 120)}"], remediation)
        return CheckResult(cid, FAIL, {}, [f"tools/list -> neither a tool list nor an error: {snippet(response.body, 120)}"],
                           remediation)

    def check_mcp_tools(self) -> CheckResult:
        """hub.mcp_tools: the listed tools have unique, unreserved names and valid input schemas."""
        cid = "hub.mcp_tools"
        tools = self.tools or []
        problems, names = [], []
        for index, tool in enumerate(tools[:200]):
            if not isinstance(tool, dict):
                problems.append(f"tool #{index} is not an object")
                continue
            name = tool.get("name")
            if not isinstance(name, str) or not name.strip():
                problems.append(f"tool #{index} has no name")
                continue
            if name in names:
                problems.append(f"tool name {name!r} is listed twice")
            names.append(name)
            if name in RESERVED_TOOL_NAMES:
                problems.append(f"tool {name!r} uses a reserved name (reset, step, state and close belong to the protocol)")
            schema = tool.get("inputSchema", tool.get("input_schema"))
            if not isinstance(schema, dict):
                problems.append(f"tool {name!r} has no input schema")
                continue
            refs = remote_refs(schema)
            if refs:
                problems.append(f"tool {name!r} input schema has non-local references {refs}")
            errors = schema_errors(schema, limit=1)
            if errors:
                problems.append(f"tool {name!r} input schema is not a valid JSON Schema: {errors[0]}")
        if not tools:
            problems.append("tools/list returned no tools")
        measured = {"tools": names[:100], "count": len(tools)}
        if problems:
            return CheckResult(cid, FAIL, measured, problems,
                               "Give every MCP tool a unique name that is not reset, step, state or close, and a valid "
                               "JSON Schema as inputSchema.")
        return CheckResult(cid, PASS, measured, [f"{len(names)} tool(s) {names[:10]}: named, valid input schemas, "
                                                 "no reserved names"])

    def check_tool_declaration(self, declared_tools: list[str]) -> CheckResult:
        """runtime.tool_declaration_accuracy: /mcp lists exactly the tools the manifest declares."""
        cid = "runtime.tool_declaration_accuracy"
        declared = sorted(set(declared_tools))
        remediation = "Make validation.capabilities.declared_tools in openenv.yaml list exactly the tools /mcp serves."
        if self.mcp is False:
            return CheckResult(cid, FAIL, {"declared": declared, "listed": []},
                               [f"openenv.yaml declares tools {declared} but /mcp says the environment does not support MCP"],
                               remediation)
        listed = sorted({t.get("name") for t in self.tools or [] if isinstance(t, dict) and isinstance(t.get("name"), str)})
        missing = [t for t in declared if t not in listed]
        extra = [t for t in listed if t not in declared]
        measured = {"declared": declared, "listed": listed[:100]}
        problems = []
        if missing:
            problems.append(f"declared but not listed by /mcp: {missing}")
        if extra:
            problems.append(f"listed by /mcp but not declared: {extra}")
        if problems:
            return CheckResult(cid, FAIL, measured, problems, remediation)
        return CheckResult(cid, PASS, measured, [f"/mcp lists exactly the declared tools {declared}"])
