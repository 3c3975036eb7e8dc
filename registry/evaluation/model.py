"""The model player: episodes of an OpenEnv environment played by a model behind an OpenAI-compatible endpoint.

    evaluation = play_model(
        ProbeClient(space_url, allowed_hosts=("*.hf.space",)),
        endpoint=settings.HUB_EVAL_OPENAI_BASE_URL,  # e.g. "https://api.openai.com/v1", a vLLM server's /v1
        api_key=settings.HUB_EVAL_OPENAI_API_KEY, model="gpt-4o-mini", action_schema=schema["action"],
        seeds=[0, 1, 2], max_steps=20, max_tokens=50_000,
        episode_deadline_s=300, total_deadline_s=1800, request_timeout_s=60, on_progress=heartbeat,
    )

Each episode is one /ws session played by `registry.conformance.episode`
with a policy that asks the model. The model sees a system prompt holding the
action JSON Schema, then for every observation (reset and after each step)
a user message with the observation as JSON (capped at
MAX_OBSERVATION_CHARS), its earlier actions in between. It answers with a call
of the one function tool `act`, whose parameters are the action schema
(`tool_choice: "required"`; an endpoint that refuses that gets `"auto"`, and
one that refuses tools gets none and is asked for the JSON object alone). An
action is a tool call's arguments, else a JSON object in the text (bare or in
a ```json fence), and must validate against the action schema (in the
sandboxed schema worker: the schema is the environment's). A reply that is
no valid action counts in `EpisodeResult.invalid_actions` and is answered
with a short correction; after `invalid_retries` corrections the episode
ends FAILED.

How an episode ends (`EpisodeResult.ended`, `failure`):

- DONE: the environment said done.
- STEP_BOUND: `max_steps` actions were played, or the episode's token
  budget `max_tokens` was spent (`failure` then says so). Tokens are counted
  from each reply's `usage.total_tokens`; a reply without usage is charged the
  `max_tokens` its request allowed.
- TIME_BOUND: the episode's `episode_deadline_s` or the run's
  `total_deadline_s` passed (waiting for the model or for the environment).
- FAILED: the model gave no valid action within its replies for a step; the
  endpoint failed (HTTP 429/5xx after retries, 401/403, 404, 400, a
  request timeout, a body over the cap or not JSON, no choices); the action
  schema could not be evaluated; the environment's session broke.

An endpoint failure that will not go away by itself (unreachable, key
refused, no such model, 429/5xx after `ENDPOINT_RETRIES` retries) or the run's
deadline also stops the run: the seeds not yet played are not played, and a
note starting with STOPPED says why. So does an action schema no model could
be given (then no episode is played at all).

Invariants: nothing the endpoint or the environment does raises out of here;
what the caller's `on_progress` raises propagates (it is called before every
request to the endpoint and every /ws frame). The API key goes in the
Authorization header of requests to the endpoint's host and nowhere else
(redirects are never followed, no proxy is taken from the environment, the
environment's client never sees it), is never logged, and never appears in
any text of the result: an endpoint that echoes it gets it replaced by
"[api key]". Pure Python, no Django.
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence
from urllib.parse import urlsplit

from registry.conformance.episode import Episode, play_episode
from registry.conformance.http import (
    BodyTooLarge,
    ProbeClient,
    ProbeHTTPError,
    RequestTimeout,
    snippet,
)
from registry.conformance.report import PROPERTY_ORDER, clip, json_safe
from registry.conformance.schema import ProbeOverloaded, SchemaWorkerError, evaluate, schema_errors

from .episodes import DONE, FAILED, STEP_BOUND, TIME_BOUND, EpisodeResult, PlayedEvaluation

HARNESS = "openenv-hub model player"
HARNESS_VERSION = "1"
# The protocol the episodes go through: openenv 0.10.0's /ws session (PROTOCOL §1.2), as registry.conformance plays it.
CLIENT_VERSION = "openenv-ws/0.10.0"
AGENT_KIND = "model"
STOPPED = "run stopped: "  # the note saying why seeds were left unplayed

TOOL_NAME = "act"
CHAT_PATH = "/chat/completions"
TOOL_MODES = ("required", "auto", "none")  # tool_choice asked for, in the order tried; "none": no tools sent
MAX_TOKENS_PER_CALL = 1024
INVALID_RETRIES = 2  # corrections per step before the episode fails
ENDPOINT_RETRIES = 2  # retries of a 429/5xx or a connection failure
RETRY_BASE_S = 0.5
MAX_RETRY_AFTER_S = 10.0
MAX_BODY_BYTES = 1024 * 1024
MAX_OBSERVATION_CHARS = 8_000
MAX_REPLY_CHARS = 4_000  # of a model's invalid reply kept in the conversation
MAX_CONVERSATION_CHARS = 64_000  # older turns are dropped beyond it
MAX_SCHEMA_CHARS = 32_000
MAX_SCAN_CHARS = 20_000  # of a text reply searched for a JSON object
ENV_FRAME_TIMEOUT_S = 60.0  # wait for one /ws reply at most this long
SCHEMA_CHECK_S = 20.0
MIN_REDACTED_KEY = 4  # shorter "keys" cannot be told apart from ordinary text
FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[ \t]*\n?(.*?)```", re.S)

Progress = Callable[[], None]


class EndpointError(Exception):
    """The endpoint gave no usable completion; str(exc) is a short reason with the API key already redacted.

    `stops_run`: asking again will not help (unreachable, key refused, no such
    model, still failing after retries). `deadline`: the request was cut by
    the episode's or the run's deadline, not by the request timeout.
    """

    def __init__(self, message: str, *, stops_run: bool = False, deadline: bool = False, refused: str = ""):
        super().__init__(message)
        self.stops_run = stops_run
        self.deadline = deadline
        self.refused = refused  # "HTTP 400: …" when the request itself was refused (tools, tool_choice, its size)


@dataclass
class Completion:
    """choices[0] of a chat completion, and the tokens its usage reports (None when it reports none)."""

    message: dict
    finish_reason: str | None
    tokens: int | None


def _call(on_progress: Progress | None) -> None:
    if on_progress is not None:
        on_progress()


def _redactor(api_key: str) -> Callable[[str], str]:
    """A function replacing the API key in a text by "[api key]" (keys too short to tell from text stay)."""
    if len(api_key or "") < MIN_REDACTED_KEY:
        return lambda text: text
    return lambda text: text.replace(api_key, "[api key]")


class ChatEndpoint:
    """One model behind one OpenAI-compatible endpoint: bounded chat completions, retried where retrying can help.

    `tool_mode` is how actions are asked for (TOOL_MODES); it steps down when
    the endpoint refuses the current one before any completion in that mode
    succeeded (`tool_mode_confirmed`), and stays for every later episode.
    Invariants: requests go to `base_url`'s host only, with the key in the
    Authorization header only; every request is bounded by `request_timeout_s`
    and by the caller's deadline, every body by `max_body_bytes`; every text
    it produces went through `redact`.
    """

    def __init__(self, base_url: str, *, api_key: str, model: str, request_timeout_s: float,
                 temperature: float = 0.0, max_body_bytes: int = MAX_BODY_BYTES, retries: int = ENDPOINT_RETRIES):
        self._key = api_key or ""
        self.redact = _redactor(self._key)
        self.model = model
        self.request_timeout_s = request_timeout_s
        self.temperature = temperature
        self.retries = retries
        self.tool_mode = TOOL_MODES[0]
        self.tool_mode_confirmed = False
        self.mode_notes: list[str] = []
        self.requests = 0
        try:
            host = urlsplit(base_url).hostname or ""
        except ValueError:
            host = ""
        # Raises HostNotAllowed for anything but a plain http(s) URL without credentials, query or fragment.
        self.client = ProbeClient(base_url, allowed_hosts=(host,) if host else (), max_body_bytes=max_body_bytes,
                                  user_agent=f"openenv-hub-model-player/{HARNESS_VERSION}")
        self.path = urlsplit(self.client.base_url).path + CHAT_PATH

    def close(self) -> None:
        self.client.close()

    def step_down(self, reason: str) -> bool:
        """Ask for actions the next way down TOOL_MODES after the endpoint refused the current one, if it may."""
        index = TOOL_MODES.index(self.tool_mode)
        if self.tool_mode_confirmed or index + 1 >= len(TOOL_MODES):
            return False
        before, self.tool_mode = self.tool_mode, TOOL_MODES[index + 1]
        asked = "tools" if before == "auto" else f'tool_choice "{before}"'
        self.mode_notes.append(f"the endpoint refused {asked} ({reason}); asked with "
                               + ('tool_choice "auto"' if self.tool_mode == "auto" else "no tools") + " instead")
        return True

    def complete(self, body: dict, *, deadline: float, on_progress: Progress | None = None) -> Completion:
        """POST `body` (model, max_tokens and temperature added) and return choices[0]; raises EndpointError."""
        body = {"model": self.model, **body, "temperature": self.temperature}
        headers = {"Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        attempt = 0
        while True:
            _call(on_progress)
            left = deadline - time.monotonic()
            timeout = min(self.request_timeout_s, left)
            if timeout <= 0:
                raise EndpointError("no time left to ask the model", deadline=True)
            self.requests += 1
            try:
                response = self.client.request("POST", CHAT_PATH, timeout_s=timeout, json_body=body, headers=headers)
            except RequestTimeout:
                if timeout < self.request_timeout_s:
                    raise EndpointError(f"the model had not answered when the time ran out ({timeout:.1f} s)",
                                        deadline=True) from None
                raise EndpointError(f"the model endpoint gave no complete answer within the request timeout "
                                    f"({self.request_timeout_s:g} s)") from None
            except BodyTooLarge:
                raise EndpointError(f"the model endpoint answered more than {self.client.max_body_bytes:,} bytes "
                                    "(the cap)") from None
            except ProbeHTTPError as exc:  # the connection could not be made or broke
                reason = f"the model endpoint is unreachable ({self.redact(str(exc))})"
                if self._wait_to_retry(attempt, None, deadline):
                    attempt += 1
                    continue
                raise EndpointError(self._tries(reason, attempt), stops_run=True) from None
            status = response.status
            if status == 200:
                return self._completion(response.body)
            detail = self._error_detail(response.body)
            what = f"HTTP {status}{': ' + detail if detail else ''}"
            if status == 429 or status >= 500:
                if self._wait_to_retry(attempt, response.headers.get("retry-after"), deadline):
                    attempt += 1
                    continue
                raise EndpointError(self._tries(f"the model endpoint answered {what}", attempt), stops_run=True)
            if status in (401, 403):
                key = "refused the API key" if self._key else "wants an API key and none is configured"
                raise EndpointError(f"the model endpoint {key} ({what})", stops_run=True)
            if status == 404:
                raise EndpointError(f"the model endpoint has no model {self.model!r} or no {self.path} ({what})",
                                    stops_run=True)
            if status in (400, 413, 422):
                raise EndpointError(f"the model endpoint refused the request ({what})", refused=what)
            if 300 <= status < 400:
                what += f" redirect to {self.redact(response.location) or '?'} (not followed)"
            raise EndpointError(f"the model endpoint answered {what}", stops_run=True)

    def _tries(self, reason: str, attempt: int) -> str:
        return reason + (f", {attempt + 1} times" if attempt else "")

    def _wait_to_retry(self, attempt: int, retry_after: str | None, deadline: float) -> bool:
        """Sleep before retry `attempt + 1` (Retry-After when it says seconds) unless retries or time ran out."""
        if attempt >= self.retries:
            return False
        wait = RETRY_BASE_S * 2 ** attempt
        try:
            if retry_after is not None:
                wait = float(retry_after)
        except ValueError:
            pass  # an HTTP date: keep the backoff
        wait = min(max(wait, 0.0), MAX_RETRY_AFTER_S)
        if time.monotonic() + wait >= deadline:
            return False
        time.sleep(wait)
        return True

    def _text(self, body: bytes, limit: int) -> str:
        """The start of a body as one line, redacted before it is cut (so no prefix of the key survives)."""
        return snippet(self.redact(body.decode("utf-8", "replace")), limit)

    def _error_detail(self, body: bytes) -> str:
        """The message of an error body ({"error": {"message"}}, {"error": str}, {"detail"}) or its start."""
        text = self.redact(body.decode("utf-8", "replace"))  # before any cut, so no prefix of the key survives
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            return snippet(text, 160)
        message: Any = None
        if isinstance(data, dict):
            error = data.get("error")
            message = error.get("message") if isinstance(error, dict) else error
            if message is None:
                message = data.get("detail") or data.get("message")
        if not isinstance(message, str):
            message = json.dumps(json_safe(message if message is not None else data), ensure_ascii=False)
        return snippet(self.redact(message), 160)

    def _completion(self, body: bytes) -> Completion:
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            raise EndpointError(f"the model endpoint answered 200 with a body that is not JSON: "
                                f"{self._text(body, 80)!r}") from None
        choices = data.get("choices") if isinstance(data, dict) else None
        choice = choices[0] if isinstance(choices, list) and choices else None
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            raise EndpointError(f"the model endpoint answered 200 without choices[0].message: {self._text(body, 80)!r}")
        self.tool_mode_confirmed = True
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        tokens = _count(usage.get("total_tokens"))
        if tokens is None and _count(usage.get("prompt_tokens")) is not None:
            tokens = _count(usage.get("prompt_tokens")) + (_count(usage.get("completion_tokens")) or 0)
        finish = choice.get("finish_reason")
        return Completion(message=message, finish_reason=finish if isinstance(finish, str) else None, tokens=tokens)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _holds_key(value: Any, redact: Callable[[str], str], depth: int = 0) -> bool:
    """Whether any string in a JSON value (keys included) holds the API key."""
    if isinstance(value, str):
        return redact(value) != value
    if depth > 100:
        return False
    if isinstance(value, dict):
        return any(_holds_key(k, redact) or _holds_key(v, redact, depth + 1) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_key(v, redact, depth + 1) for v in value)
    return False


def _schema_for_model(schema: Any, depth: int = 0) -> Any:
    """The action schema as the environment published it: the hub's PROPERTY_ORDER bookkeeping undone."""
    if depth > 40:
        return schema
    if isinstance(schema, list):
        return [_schema_for_model(v, depth + 1) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _schema_for_model(v, depth + 1) for k, v in schema.items() if k != PROPERTY_ORDER}
    order = schema.get(PROPERTY_ORDER)
    if isinstance(out.get("properties"), dict) and isinstance(order, list):
        props = out["properties"]
        out["properties"] = {**{k: props[k] for k in order if isinstance(k, str) and k in props}, **props}
    return out


def schema_problem(action_schema: Any) -> str | None:
    """Why an action schema cannot be given to a model (not an object, invalid, too large), or None."""
    if not isinstance(action_schema, dict):
        return "the environment's action schema is not a JSON object"
    errors = schema_errors(action_schema, limit=1)
    if errors:
        return f"the environment's action schema is not a valid JSON Schema ({clip(errors[0], 160)})"
    size = len(json.dumps(action_schema, ensure_ascii=False))
    if size > MAX_SCHEMA_CHARS:
        return f"the environment's action schema takes {size:,} characters, more than the {MAX_SCHEMA_CHARS:,} " \
               "a model is given"
    return None


def _observation_text(data: Any, steps: int) -> str:
    """The user message for one observation: which it is, then the observation as JSON, capped."""
    text = json.dumps(json_safe(data), ensure_ascii=False, separators=(", ", ": "))
    if len(text) > MAX_OBSERVATION_CHARS:
        text = text[:MAX_OBSERVATION_CHARS] + f" … [cut: {len(text):,} characters in all]"
    return (f"Observation after step {steps}:" if steps else "Observation after the reset:") + "\n" + text


def _json_in_text(content: str) -> tuple[Any, str | None]:
    """The JSON object a text reply holds (all of it, a ```json fence, or the first object in it), or why none."""
    text = content.strip()[:MAX_SCAN_CHARS]
    candidates = [text] + [m.group(2).strip() for m in FENCE.finditer(text)]
    found_other = None
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            return value, None
        found_other = found_other or type(value).__name__
    decoder = json.JSONDecoder()
    starts = [i for i, c in enumerate(text) if c == "{"][:50]
    for start in starts:
        try:
            value, _ = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            return value, None
    if found_other:
        return None, f"the reply is a JSON {found_other}, not an object"
    return None, "the reply holds no JSON object"


@dataclass
class _Parsed:
    """A reply read as an action: the action or why not, and the assistant message to keep in the conversation."""

    action: dict | None
    problem: str | None
    message: dict
    call_id: str | None = None


class ModelPolicy:
    """The policy of one episode (a `registry.conformance.episode.Policy`): each action is asked of the model.

    After it returns None, `stop` says why when the reason is its own
    ((ending, reason): a bound, the model's invalid replies, the endpoint);
    `stops_run` is set when the run should not go on. Invariants: only
    actions the action schema accepts and that do not hold the API key are
    returned; at most `max_steps` actions per episode; no request starts once
    `max_tokens` are spent or `deadline` passed; every reason went through
    the endpoint's `redact`.
    """

    def __init__(self, endpoint: ChatEndpoint, *, action_schema: dict, max_steps: int, max_tokens: int,
                 deadline: float, run_deadline: float | None = None, invalid_retries: int = INVALID_RETRIES,
                 max_tokens_per_call: int = MAX_TOKENS_PER_CALL, on_progress: Progress | None = None):
        self.endpoint = endpoint
        self.action_schema = action_schema
        self.model_schema = _schema_for_model(action_schema)
        self.max_steps = max_steps
        self.max_tokens = max_tokens
        self.deadline = deadline
        self.run_deadline = run_deadline if run_deadline is not None else deadline
        self.invalid_retries = invalid_retries
        self.max_tokens_per_call = max_tokens_per_call
        self.on_progress = on_progress
        self.invalid_actions = 0
        self.tokens = 0
        self.uncounted = 0  # replies without usage, charged their max_tokens
        self.stop: tuple[str, str] | None = None
        self.stops_run: str | None = None
        self._turns: list[list[dict]] = []  # one per action played: observation, reply (and the tool's answer)

    def __call__(self, episode: Episode) -> dict | None:
        if self.stop is not None or episode.steps_ok >= self.max_steps:
            return None
        step = episode.steps_ok + 1
        turn = [{"role": "user", "content": _observation_text(episode.last_observation, episode.steps_ok)}]
        problem = ""
        for _ in range(1 + self.invalid_retries):
            if self.tokens >= self.max_tokens:
                self.stop = (STEP_BOUND, f"the token budget ({self.max_tokens:,}) was spent after "
                                         f"{episode.steps_ok} step(s)")
                return None
            try:
                completion = self._ask(turn)
            except EndpointError as exc:
                self._endpoint_failed(exc, step)
                return None
            parsed = self._parse(completion)
            if parsed.action is not None:
                problem = self._invalid(parsed.action)
                if problem is None:
                    turn.append(parsed.message)
                    if parsed.call_id is not None:
                        turn.append({"role": "tool", "tool_call_id": parsed.call_id,
                                     "content": "Sent to the environment; its observation follows."})
                    self._turns.append(turn)
                    return parsed.action
                if self.stop is not None:  # the schema itself could not be evaluated
                    return None
            else:
                problem = parsed.problem
            self.invalid_actions += 1
            turn.append(parsed.message)
            correction = f"That is not a valid action: {problem}. {self._instruction()}"
            if parsed.call_id is not None:
                turn.append({"role": "tool", "tool_call_id": parsed.call_id, "content": correction})
            else:
                turn.append({"role": "user", "content": correction})
        replies = 1 + self.invalid_retries
        self.stop = (FAILED, clip(self.endpoint.redact(
            f"step {step}: the model gave no valid action in {replies} repl{'y' if replies == 1 else 'ies'}; "
            f"the last: {problem}"), 500))
        return None

    # ---------------------------------------------------------------- asking

    def _instruction(self) -> str:
        if self.endpoint.tool_mode == "none":
            return "Answer with the action alone: one JSON object valid against the action schema, no other text."
        return f"Call the function `{TOOL_NAME}` once, with the action as its arguments."

    def _system(self) -> str:
        schema = json.dumps(self.model_schema, ensure_ascii=False, indent=1)
        return (
            "You are the agent in an OpenEnv environment, playing one episode. After the reset and after each of "
            "your actions you are shown the environment's observation as JSON: "
            '{"observation": {...}, "reward": number or null, "done": true or false}. '
            f"Choose each action to earn as much reward as possible; you have at most {self.max_steps} actions.\n\n"
            f"An action is a JSON object valid against this JSON Schema:\n{schema}\n\n{self._instruction()}"
        )

    def _messages(self, turn: list[dict]) -> list[dict]:
        """The system prompt, as many earlier turns as fit MAX_CONVERSATION_CHARS (newest kept), the current turn."""
        size = sum(len(json.dumps(m, ensure_ascii=False)) for m in turn)
        kept: list[list[dict]] = []
        for earlier in reversed(self._turns):
            size += sum(len(json.dumps(m, ensure_ascii=False)) for m in earlier)
            if size > MAX_CONVERSATION_CHARS:
                break
            kept.insert(0, earlier)
        return [{"role": "system", "content": self._system()}, *(m for t in kept for m in t), *turn]

    def _ask(self, turn: list[dict]) -> Completion:
        """One completion for the conversation so far, stepping the tool mode down while the endpoint refuses it."""
        while True:
            allowed = min(self.max_tokens_per_call, max(1, self.max_tokens - self.tokens))
            body: dict[str, Any] = {"messages": self._messages(turn), "max_tokens": allowed}
            if self.endpoint.tool_mode != "none":
                body["tools"] = [{"type": "function", "function": {
                    "name": TOOL_NAME, "description": "Send one action to the environment.",
                    "parameters": self.model_schema}}]
                body["tool_choice"] = self.endpoint.tool_mode
            try:
                completion = self.endpoint.complete(body, deadline=self.deadline, on_progress=self.on_progress)
            except EndpointError as exc:
                if exc.refused and self.endpoint.step_down(exc.refused):
                    continue
                raise
            if completion.tokens is None:
                self.uncounted += 1
            self.tokens += completion.tokens if completion.tokens is not None else allowed
            return completion

    def _endpoint_failed(self, exc: EndpointError, step: int) -> None:
        reason = self.endpoint.redact(str(exc))
        if exc.deadline:
            whose = "run's" if self.run_deadline <= self.deadline else "episode's"
            self.stop = (TIME_BOUND, clip(f"step {step}: the {whose} time ran out while asking the model ({reason})",
                                          500))
            if whose == "run's":
                self.stops_run = "the run's time ran out"
            return
        self.stop = (FAILED, clip(f"step {step}: {reason}", 500))
        if exc.stops_run:
            self.stops_run = clip(reason, 300)

    # ---------------------------------------------------------------- reading a reply

    def _parse(self, completion: Completion) -> _Parsed:
        message = completion.message
        content = message.get("content")
        if isinstance(content, list):  # content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
        content = content if isinstance(content, str) else ""
        calls = message.get("tool_calls")
        call = calls[0] if isinstance(calls, list) and calls and isinstance(calls[0], dict) else None
        if call is not None:
            function = call.get("function") if isinstance(call.get("function"), dict) else {}
            name = function.get("name")
            arguments = function.get("arguments")
            call_id = call.get("id")
            if not isinstance(call_id, str) or not 0 < len(call_id) <= 100:
                call_id = f"call_{uuid.uuid4().hex[:12]}"
            raw = arguments if isinstance(arguments, str) else json.dumps(json_safe(arguments), ensure_ascii=False)
            kept = {"role": "assistant", "content": None, "tool_calls": [{
                "id": call_id, "type": "function",
                "function": {"name": str(name)[:64] if name else TOOL_NAME, "arguments": raw[:MAX_REPLY_CHARS]}}]}
            if name != TOOL_NAME:
                return _Parsed(None, f"it calls {clip(name, 60)!r}, not the function `{TOOL_NAME}`", kept, call_id)
            if isinstance(arguments, dict):
                value = arguments
            else:
                try:
                    value = json.loads(arguments) if isinstance(arguments, str) else None
                except (ValueError, RecursionError) as exc:
                    why = exc.msg if isinstance(exc, json.JSONDecodeError) else "too deeply nested"
                    return _Parsed(None, f"the arguments of `{TOOL_NAME}` are not JSON ({why}): "
                                         f"{snippet(self.endpoint.redact(raw), 80)!r}", kept, call_id)
            if not isinstance(value, dict):
                return _Parsed(None, f"the arguments of `{TOOL_NAME}` are not a JSON object", kept, call_id)
            action = self._unwrap(value)
            kept["tool_calls"][0]["function"]["arguments"] = json.dumps(action, ensure_ascii=False)
            return _Parsed(action, None, kept, call_id)
        kept = {"role": "assistant", "content": content[:MAX_REPLY_CHARS]}
        if not content.strip():
            cut = completion.finish_reason == "length"
            return _Parsed(None, "the reply was cut at max_tokens before any action" if cut
                           else "the reply holds neither a call nor any text", kept)
        value, problem = _json_in_text(content)
        if value is None:
            if completion.finish_reason == "length":
                problem += " (it was cut at max_tokens)"
            return _Parsed(None, f"{problem}: {snippet(self.endpoint.redact(content), 80)!r}", kept)
        return _Parsed(self._unwrap(value), None, kept)

    def _unwrap(self, value: dict) -> dict:
        """{"action": {...}} as the action it wraps, unless the schema has a property named action."""
        properties = self.action_schema.get("properties")
        if (set(value) == {"action"} and isinstance(value["action"], dict)
                and not (isinstance(properties, dict) and "action" in properties)):
            return value["action"]
        return value

    def _invalid(self, action: dict) -> str | None:
        """Why the action schema rejects `action` (sandboxed), or None; sets `stop` when it cannot be evaluated.

        An action holding the API key is refused first: it would take the key to the environment, and the
        schema worker's error lines, cut at a length of their own, could carry a piece of it.
        """
        if _holds_key(action, self.endpoint.redact):
            return "it holds the API key, which goes to the model endpoint only"
        timeout = max(1.0, min(SCHEMA_CHECK_S, self.deadline - time.monotonic()))
        try:
            entry = evaluate([{"id": "a", "op": "validate", "schema": self.action_schema, "instances": [action]}],
                             timeout_s=timeout).get("a", {})
        except (SchemaWorkerError, ProbeOverloaded) as exc:
            self.stop = (FAILED, clip(f"the action could not be checked against the action schema: {exc}", 500))
            return "unchecked"
        if entry.get("failed"):
            self.stop = (FAILED, clip(f"the action schema could not be evaluated: {entry['failed']}", 500))
            return "unchecked"
        errors = (entry.get("results") or [[]])[0]
        if not errors:
            return None
        return clip(self.endpoint.redact(f"the action schema rejects it ({'; '.join(errors[:3])}): "
                                         f"{json.dumps(action, ensure_ascii=False)}"), 300)


def model_policy(endpoint: ChatEndpoint, *, action_schema: dict, max_steps: int, max_tokens: int, deadline: float,
                 run_deadline: float | None = None, invalid_retries: int = INVALID_RETRIES,
                 max_tokens_per_call: int = MAX_TOKENS_PER_CALL, on_progress: Progress | None = None) -> ModelPolicy:
    """A fresh policy for one episode, asking `endpoint`'s model for each action; see ModelPolicy."""
    return ModelPolicy(endpoint, action_schema=action_schema, max_steps=max_steps, max_tokens=max_tokens,
                       deadline=deadline, run_deadline=run_deadline, invalid_retries=invalid_retries,
                       max_tokens_per_call=max_tokens_per_call, on_progress=on_progress)


# -------------------------------------------------------------------- playing a run


@dataclass
class _Tally:
    tokens: int = 0
    uncounted: int = 0
    notes: list[str] = field(default_factory=list)


def _step_reward(data: Any) -> float:
    reward = data.get("reward") if isinstance(data, dict) else None
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        return 0.0
    return float(reward)


def _success(data: Any) -> bool | None:
    """`success` where the last observation reports it (its metadata, the observation, the observation's metadata)."""
    if not isinstance(data, dict):
        return None
    observation = data.get("observation") if isinstance(data.get("observation"), dict) else {}
    for where in (data.get("metadata"), observation, observation.get("metadata")):
        if isinstance(where, dict) and isinstance(where.get("success"), bool):
            return where["success"]
    return None


def _result(episode: Episode, policy: ModelPolicy, *, seed: int | None, episode_id: str, began: float,
            deadline: float, max_steps: int, redact: Callable[[str], str]) -> EpisodeResult:
    """The EpisodeResult of a played episode: how it ended, from the policy's own stop or the episode's record."""
    invalid = policy.invalid_actions
    if policy.stop is not None:
        ended, failure = policy.stop
    elif episode.done:
        ended, failure = DONE, ""
    elif episode.failure:
        failure = episode.failure
        timed_out = time.monotonic() >= deadline or failure.startswith("the episode budget ran out")
        ended = TIME_BOUND if timed_out else FAILED
        last = episode.exchanges[-1] if episode.exchanges else None
        if last is not None and last.op == "step" and last.reply.error_code == "VALIDATION_ERROR":
            invalid += 1  # the environment refused an action the schema accepted
        elif last is not None and last.op == "state_after_error":
            refused = episode.exchanges[-2] if len(episode.exchanges) > 1 else None
            if refused is not None and refused.op == "step" and refused.reply.error_code == "VALIDATION_ERROR":
                invalid += 1
    elif episode.steps_ok >= max_steps:
        ended, failure = STEP_BOUND, ""
    else:
        ended, failure = FAILED, "the episode ended without a reason (a bug of the model player)"
    steps = [e.reply.data for e in episode.observations() if e.op == "step"]
    return EpisodeResult(
        seed=seed, reward=sum(_step_reward(d) for d in steps), steps=episode.steps_ok, ended=ended,
        wall_s=round(time.monotonic() - began, 3), success=_success(episode.last_observation),
        invalid_actions=invalid, episode_id=episode_id, failure=clip(redact(failure), 500) if failure else "",
    )


def play_model(
    client: ProbeClient,
    *,
    endpoint: str,
    api_key: str,
    model: str,
    action_schema: dict,
    seeds: Sequence[int | None],
    max_steps: int,
    max_tokens: int,
    episode_deadline_s: float,
    total_deadline_s: float,
    request_timeout_s: float,
    on_progress: Progress | None = None,
    max_tokens_per_call: int = MAX_TOKENS_PER_CALL,
    invalid_retries: int = INVALID_RETRIES,
    temperature: float = 0.0,
) -> PlayedEvaluation:
    """Play one episode per seed on `client`'s environment, each action asked of `model` at `endpoint`.

    `endpoint` is the API's base URL (…/v1: chat completions are POSTed to
    `endpoint + "/chat/completions"`); `max_tokens` is each episode's token
    budget, `max_tokens_per_call` what one request may use. See the module
    docstring for the conversation, the endings and what stops a run.
    """
    started = time.monotonic()
    run_deadline = started + total_deadline_s
    evaluation = PlayedEvaluation(agent=model, agent_kind=AGENT_KIND, harness=HARNESS,
                                  harness_version=HARNESS_VERSION, client_version=CLIENT_VERSION)
    seeds = list(seeds)
    redact = _redactor(api_key)
    problem = schema_problem(action_schema)
    if api_key and (not api_key.isprintable() or any(c.isspace() for c in api_key)):
        problem = "the API key holds characters an HTTP header cannot carry"
    if problem is not None:
        evaluation.notes.append(STOPPED + f"{problem}; no episode was played")
        return evaluation
    try:
        chat = ChatEndpoint(endpoint, api_key=api_key, model=model, request_timeout_s=request_timeout_s,
                            temperature=temperature)
    except ProbeHTTPError as exc:
        evaluation.notes.append(STOPPED + clip(redact(f"the model endpoint URL is not usable: {exc}"), 300)
                                + "; no episode was played")
        return evaluation
    tally = _Tally()
    stopped = None
    try:
        for index, seed in enumerate(seeds):
            if stopped is None and time.monotonic() >= run_deadline:
                stopped = f"the run's time ({total_deadline_s:g} s) ran out"
            if stopped is not None:
                unplayed = seeds[index:]
                evaluation.notes.append(STOPPED + f"{stopped}; {len(unplayed)} seed(s) not played: "
                                        + clip(unplayed, 200))
                break
            began = time.monotonic()
            deadline = min(began + episode_deadline_s, run_deadline)
            policy = model_policy(chat, action_schema=action_schema, max_steps=max_steps, max_tokens=max_tokens,
                                  deadline=deadline, run_deadline=run_deadline, invalid_retries=invalid_retries,
                                  max_tokens_per_call=max_tokens_per_call, on_progress=on_progress)
            episode_id = f"model-eval-{uuid.uuid4().hex[:12]}"
            reset_data: dict[str, Any] = {"episode_id": episode_id}
            if seed is not None:
                reset_data["seed"] = seed

            def budget(limit: float | None) -> float:
                left = min(ENV_FRAME_TIMEOUT_S, run_deadline - time.monotonic())
                return left if limit is None else min(limit, left)

            episode = play_episode(client, policy, reset_data=reset_data, deadline=deadline, budget=budget,
                                   on_progress=on_progress)
            evaluation.episodes.append(_result(episode, policy, seed=seed, episode_id=episode_id, began=began,
                                               deadline=deadline, max_steps=max_steps, redact=redact))
            tally.tokens += policy.tokens
            tally.uncounted += policy.uncounted
            stopped = policy.stops_run
        else:
            if stopped is not None:
                evaluation.notes.append(STOPPED + f"{stopped} (after the last seed)")
    finally:
        chat.close()
    mode = {"required": f'calls of the function `{TOOL_NAME}` (tool_choice "required")',
            "auto": f'calls of the function `{TOOL_NAME}` (tool_choice "auto")',
            "none": "a JSON object in the reply (no tools)"}[chat.tool_mode]
    evaluation.notes += [clip(redact(note), 300) for note in chat.mode_notes]
    evaluation.notes += [
        f"actions asked of the model through an OpenAI-compatible chat endpoint as {mode}, validated against the "
        f"action schema; {1 + invalid_retries} replies per step at most",
        f"bounds: {max_steps} steps, {max_tokens:,} tokens and {episode_deadline_s:g} s per episode, "
        f"{max_tokens_per_call:,} tokens and {request_timeout_s:g} s per request, {total_deadline_s:g} s in all",
        f"tokens: {tally.tokens:,} over {chat.requests} request(s)"
        + (f" ({tally.uncounted} reply(s) without usage charged their max_tokens)" if tally.uncounted else ""),
    ]
    return evaluation
