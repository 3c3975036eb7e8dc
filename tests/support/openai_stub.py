"""A real HTTP server that stands in for an OpenAI-compatible chat API in tests.

The hub evaluates models through any endpoint that speaks OpenAI's chat
completions API (OpenAI itself, vLLM, TGI, Ollama, a gateway). No machine here
reaches one, so tests drive the player against this server instead::

    with OpenAIStub(api_key="sk-test") as stub:
        stub.add_model("bisect", lambda request: tool_call({"guess": 50}))
        httpx.post(stub.base_url + "/chat/completions", headers={"Authorization": "Bearer sk-test"},
                   json={"model": "bisect", "messages": [{"role": "user", "content": "go"}]})

Routes: ``POST /v1/chat/completions`` and ``GET /v1/models``; anything else
answers 404. ``base_url`` (``http://127.0.0.1:PORT/v1``) is what an OpenAI
client takes as its base URL.

Models are scripted: ``add_model(name, script)`` where ``script`` is handed
the request's JSON and returns a ``Reply`` (``text``, ``tool_call``,
``http_error``, ``raw``), or a plain str (content) or dict (the arguments of a
call to ``act``) for short. What a script raises is a bug of the test: it is
kept in ``errors`` and answered 500.

Kept close to the real API, so that a player that works here works there:

* Errors are ``{"error": {"message", "type", "param", "code"}}``. A request
  the API would refuse gets 400: messages that are not a list of
  ``{role, content}``, an assistant ``tool_calls`` message not followed by one
  ``tool`` message per call id, a ``tool`` message answering no call, tools
  that are not ``{"type": "function", "function": {name, parameters}}``, a
  ``tool_choice`` without tools, a ``max_tokens`` below 1, a temperature
  outside [0, 2]. An unknown model gets 404 ``model_not_found``.
* With ``api_key`` set, every request needs ``Authorization: Bearer <key>``;
  else 401 ``invalid_api_key`` quoting the last four characters of what was
  sent, as OpenAI does.
* A model added with ``tools=False`` answers 400 to any request with
  ``tools``; with ``required_tool_choice=False`` it refuses
  ``tool_choice: "required"`` (older vLLM and TGI servers do both).
* Content longer than ``max_tokens`` (4 characters a token) is cut, with
  ``finish_reason: "length"``. ``usage`` counts 4 characters a token, or is
  left out for a model added with ``usage=False``.

Faults: a ``Reply`` may carry a ``delay`` and any status or raw body; ``inject``
answers matching requests with a fault whatever the model (e.g. the next two
requests 503). Every request answered is in ``requests`` before its response
is sent; delays end at once when the stub stops.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

__all__ = ["Injection", "OpenAIStub", "RecordedRequest", "Reply", "http_error", "raw", "text", "tool_call"]

CHARS_PER_TOKEN = 4
MAX_REQUEST_BYTES = 8 * 1024 * 1024
ROLES = ("system", "developer", "user", "assistant", "tool")
FUNCTION_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@dataclass
class Reply:
    """What a scripted model answers to one request.

    A 200 reply is a chat completion whose message has ``content`` and/or
    ``tool_calls`` (``(name, arguments)`` pairs; arguments given as a dict are
    sent as their JSON string, a str verbatim). ``body`` replaces the whole
    response body (an error, garbage, a huge answer); ``delay`` waits before
    answering.
    """

    content: str | None = None
    tool_calls: list[tuple[str, str | dict]] = field(default_factory=list)
    status: int = 200
    body: bytes | str | dict | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    finish_reason: str | None = None
    delay: float = 0.0


def text(content: str, *, delay: float = 0.0) -> Reply:
    """An assistant message with text content."""
    return Reply(content=content, delay=delay)


def tool_call(arguments: str | dict, *, name: str = "act", content: str | None = None, delay: float = 0.0) -> Reply:
    """An assistant message calling function ``name`` (arguments: a dict, or the raw JSON string to send)."""
    return Reply(content=content, tool_calls=[(name, arguments)], delay=delay)


def http_error(status: int, message: str = "", *, code: str | None = None, retry_after: int | None = None,
               delay: float = 0.0) -> Reply:
    """An error answer in OpenAI's shape (429 with ``Retry-After`` when given)."""
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    return Reply(status=status, body=_error_body(message or f"scripted error {status}", code), headers=headers,
                 delay=delay)


def raw(body: bytes | str, *, status: int = 200, content_type: str = "application/json", delay: float = 0.0) -> Reply:
    """Exactly these bytes as the response body (not JSON, truncated JSON, a huge body)."""
    return Reply(status=status, body=body.encode() if isinstance(body, str) else body,
                 headers={"Content-Type": content_type}, delay=delay)


def _error_body(message: str, code: str | None = None, kind: str = "invalid_request_error",
                param: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


@dataclass
class RecordedRequest:
    """One request the stub answered; ``json`` is the parsed body (None when it was not JSON)."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: Any
    model: str | None
    status: int | None = None
    injected: bool = False
    received_at: float = 0.0  # time.monotonic() when it arrived

    @property
    def messages(self) -> list[dict]:
        messages = self.json.get("messages") if isinstance(self.json, dict) else None
        return messages if isinstance(messages, list) else []


@dataclass
class Injection:
    """A fault served instead of the real answer; see ``OpenAIStub.inject``."""

    status: int
    remaining: int | None
    model: str | None = None
    path: str | None = None
    body: bytes | str | dict | None = None
    retry_after: int | None = None
    delay: float = 0.0
    hits: int = 0

    def matches(self, request: RecordedRequest) -> bool:
        if self.remaining is not None and self.remaining <= 0:
            return False
        if self.model is not None and request.model != self.model:
            return False
        return self.path is None or request.path == self.path


@dataclass
class _Model:
    name: str
    script: Callable[[dict], Reply | str | dict]
    tools: bool
    required_tool_choice: bool
    usage: bool
    delay: float


@dataclass
class _Answer:
    status: int
    body: bytes
    headers: list[tuple[str, str]]


def _json_answer(status: int, payload: Any, headers: Mapping[str, str] | None = None) -> _Answer:
    extra = [(k, v) for k, v in (headers or {}).items()]
    return _Answer(status, json.dumps(payload, separators=(",", ":")).encode(), [("Content-Type", "application/json"), *extra])


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server_version = "OpenAIStub/1.0"
    stub: OpenAIStub

    def setup(self) -> None:
        super().setup()
        self.stub._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.stub._track(self.connection, add=False)

    def _dispatch(self) -> None:
        self.stub._serve(self)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _dispatch

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


class OpenAIStub:
    """Scripted models behind an OpenAI-compatible chat API, served over real HTTP on 127.0.0.1.

    Invariants: every request answered (refused, injected and failed ones
    included) is in ``requests`` before its response is sent; a script is
    only called for a request the real API would accept; tool call ids are
    unique across the stub's life.
    """

    def __init__(self, *, api_key: str | None = None) -> None:
        self.api_key = api_key
        self.errors: list[str] = []  # tracebacks of scripts that raised (answered 500); tests should assert it is empty
        self._lock = threading.RLock()
        self._models: dict[str, _Model] = {}
        self._requests: list[RecordedRequest] = []
        self._injections: list[Injection] = []
        self._calls = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        self._stopping = threading.Event()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> OpenAIStub:
        """Bind 127.0.0.1 on an OS-chosen port and serve from a daemon thread."""
        if self._server is not None:
            return self
        self._stopping.clear()
        handler = type("OpenAIStubHandler", (_Handler,), {"stub": self})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving: end every delay at once and drop open connections."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> OpenAIStub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        if self._server is None:
            raise RuntimeError("OpenAIStub is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def base_url(self) -> str:
        """The API's base URL, ``…/v1``: what an OpenAI client (and the hub's player) is configured with."""
        return self.url + "/v1"

    # ------------------------------------------------------------------ models, requests, faults

    def add_model(
        self,
        name: str,
        script: Callable[[dict], Reply | str | dict],
        *,
        tools: bool = True,
        required_tool_choice: bool = True,
        usage: bool = True,
        delay: float = 0.0,
    ) -> None:
        """Serve model ``name``: each accepted request goes to ``script`` (see the module docstring)."""
        with self._lock:
            self._models[name] = _Model(name, script, tools, required_tool_choice, usage, delay)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request answered so far, oldest first."""
        with self._lock:
            return list(self._requests)

    def completions(self, model: str | None = None) -> list[RecordedRequest]:
        """The chat completion requests (for ``model`` only, when given)."""
        return [r for r in self.requests if r.path == "/v1/chat/completions" and (model is None or r.model == model)]

    def reset_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    def inject(
        self,
        status: int = 503,
        *,
        times: int | None = 1,
        model: str | None = None,
        path: str | None = None,
        body: bytes | str | dict | None = None,
        retry_after: int | None = None,
        delay: float = 0.0,
    ) -> Injection:
        """Answer the next ``times`` matching requests (None: all) with ``status``, before any other check.

        ``model`` and ``path`` narrow the match; ``body`` defaults to an
        OpenAI-shaped error; ``delay`` waits first. The returned Injection
        counts its ``hits``.
        """
        injection = Injection(status, times, model, path, body, retry_after, delay)
        with self._lock:
            self._injections.append(injection)
        return injection

    def clear_injections(self) -> None:
        with self._lock:
            self._injections.clear()

    # ------------------------------------------------------------------ internals

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        received_at = time.monotonic()
        length = int(handler.headers.get("Content-Length") or 0)
        if length > MAX_REQUEST_BYTES:
            handler.close_connection = True
            self._send(handler, _json_answer(413, _error_body("request too large")))
            return
        body = handler.rfile.read(length) if length > 0 else b""
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        model = parsed.get("model") if isinstance(parsed, dict) and isinstance(parsed.get("model"), str) else None
        record = RecordedRequest(
            method=handler.command, path=urlsplit(handler.path).path,
            headers={k.lower(): v for k, v in handler.headers.items()},
            body=body, json=parsed, model=model, received_at=received_at,
        )
        with self._lock:
            injection = next((i for i in self._injections if i.matches(record)), None)
            if injection is not None:
                injection.hits += 1
                if injection.remaining is not None:
                    injection.remaining -= 1
        delay = 0.0
        if injection is not None:
            delay = injection.delay
            answer = self._injected(injection)
        else:
            try:
                answer, delay = self._answer(record)
            except Exception:
                self.errors.append(traceback.format_exc())
                answer, delay = _json_answer(500, _error_body("OpenAIStub internal error (see stub.errors)",
                                                              kind="server_error")), 0.0
        record.status = answer.status
        record.injected = injection is not None
        with self._lock:
            self._requests.append(record)
        if delay > 0 and self._stopping.wait(delay):
            handler.close_connection = True
            return
        self._send(handler, answer)

    @staticmethod
    def _injected(injection: Injection) -> _Answer:
        headers = {"Retry-After": str(injection.retry_after)} if injection.retry_after is not None else {}
        body = injection.body
        if body is None:
            body = _error_body(f"injected {injection.status}", kind="server_error")
        if isinstance(body, dict):
            return _json_answer(injection.status, body, headers)
        data = body.encode() if isinstance(body, str) else body
        return _Answer(injection.status, data, [("Content-Type", "text/plain; charset=utf-8"), *headers.items()])

    def _answer(self, record: RecordedRequest) -> tuple[_Answer, float]:
        """The answer to a request that no injection took, and how long to wait before sending it."""
        refused = self._authorize(record.headers.get("authorization"))
        if refused is not None:
            return refused, 0.0
        if record.path == "/v1/models":
            if record.method != "GET":
                return _json_answer(405, _error_body(f"{record.method} not allowed on /v1/models")), 0.0
            with self._lock:
                names = sorted(self._models)
            data = [{"id": name, "object": "model", "created": 0, "owned_by": "openai-stub"} for name in names]
            return _json_answer(200, {"object": "list", "data": data}), 0.0
        if record.path != "/v1/chat/completions":
            return _json_answer(404, _error_body(f"Unknown request URL: {record.method} {record.path}.",
                                                 "unknown_url")), 0.0
        if record.method != "POST":
            return _json_answer(405, _error_body(f"{record.method} not allowed on /v1/chat/completions")), 0.0
        request = record.json
        if not isinstance(request, dict):
            return _json_answer(400, _error_body("The request body is not a JSON object.")), 0.0
        problem = _request_problem(request)
        if problem is not None:
            return _json_answer(400, _error_body(problem[1], param=problem[0])), 0.0
        with self._lock:
            model = self._models.get(request["model"])
        if model is None:
            return _json_answer(404, _error_body(
                f"The model `{request['model']}` does not exist or you do not have access to it.",
                "model_not_found")), 0.0
        if request.get("tools") and not model.tools:
            return _json_answer(400, _error_body(f"tools are not supported by model {model.name}", param="tools")), 0.0
        if request.get("tool_choice") == "required" and not model.required_tool_choice:
            return _json_answer(400, _error_body('tool_choice "required" is not supported', param="tool_choice")), 0.0
        try:
            reply = model.script(request)
        except Exception:
            self.errors.append(traceback.format_exc())
            return _json_answer(500, _error_body(f"OpenAIStub: the script of {model.name} raised (see stub.errors)",
                                                 kind="server_error")), 0.0
        if isinstance(reply, str):
            reply = text(reply)
        elif isinstance(reply, dict):
            reply = tool_call(reply)
        return self._completion(model, request, reply), model.delay + reply.delay

    def _authorize(self, header: str | None) -> _Answer | None:
        if self.api_key is None:
            return None
        scheme, _, token = (header or "").partition(" ")
        if scheme.lower() == "bearer" and token.strip() == self.api_key:
            return None
        if not token.strip():
            message = ("You didn't provide an API key. You need to provide your API key in an Authorization header "
                       "using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
        else:
            message = f"Incorrect API key provided: ****{token.strip()[-4:]}."
        return _json_answer(401, _error_body(message, "invalid_api_key"))

    def _completion(self, model: _Model, request: dict, reply: Reply) -> _Answer:
        if reply.body is not None or reply.status != 200:
            body = reply.body if reply.body is not None else _error_body(f"scripted {reply.status}")
            if isinstance(body, dict):
                return _json_answer(reply.status, body, reply.headers)
            headers = dict(reply.headers)
            headers.setdefault("Content-Type", "application/json")
            return _Answer(reply.status, body.encode() if isinstance(body, str) else body, list(headers.items()))
        limit = request.get("max_tokens") or request.get("max_completion_tokens")
        content, finish = reply.content, reply.finish_reason
        if content is not None and isinstance(limit, int) and len(content) > limit * CHARS_PER_TOKEN:
            content, finish = content[: limit * CHARS_PER_TOKEN], finish or "length"
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reply.tool_calls:
            calls = []
            with self._lock:
                for name, arguments in reply.tool_calls:
                    self._calls += 1
                    calls.append({
                        "id": f"call_{self._calls:06d}", "type": "function",
                        "function": {"name": name,
                                     "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)},
                    })
            message["tool_calls"] = calls
        completion: dict[str, Any] = {
            "id": f"chatcmpl-{time.monotonic_ns()}", "object": "chat.completion", "created": int(time.time()),
            "model": model.name,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": finish or ("tool_calls" if reply.tool_calls else "stop")}],
        }
        if model.usage:
            prompt = len(json.dumps(request.get("messages"))) + len(json.dumps(request.get("tools") or []))
            completion_chars = len(content or "") + len(json.dumps(message.get("tool_calls") or []))
            prompt_tokens = prompt // CHARS_PER_TOKEN + 1
            completion_tokens = completion_chars // CHARS_PER_TOKEN + 1
            completion["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                   "total_tokens": prompt_tokens + completion_tokens}
        return _json_answer(200, completion, reply.headers)

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, answer: _Answer) -> None:
        try:
            handler.send_response(answer.status)
            for key, value in answer.headers:
                handler.send_header(key, value)
            handler.send_header("Content-Length", str(len(answer.body)))
            handler.end_headers()
            view = memoryview(answer.body)
            for start in range(0, len(view), 1 << 20):
                handler.wfile.write(view[start : start + (1 << 20)])
            handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            handler.close_connection = True  # the client stopped reading (a capped body, a timeout)


def _request_problem(request: dict) -> tuple[str, str] | None:
    """(param, message) for a chat completion request the real API refuses with 400, else None."""
    if not isinstance(request.get("model"), str) or not request["model"]:
        return "model", "you must provide a model parameter"
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages", "messages must be a non-empty array"
    pending: list[str] = []  # tool call ids the next messages must answer
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            return where, f"{where}: an object with a role in {ROLES} is required"
        role, content = message["role"], message.get("content")
        if pending and role != "tool":
            return where, ("An assistant message with 'tool_calls' must be followed by tool messages responding "
                           f"to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                           f"{', '.join(pending)}")
        if role == "tool":
            if message.get("tool_call_id") not in pending:
                return where, ("messages with role 'tool' must be a response to a preceding message with "
                               "'tool_calls'")
            pending.remove(message["tool_call_id"])
        if role == "assistant" and message.get("tool_calls") is not None:
            calls = message["tool_calls"]
            if not isinstance(calls, list) or not calls:
                return f"{where}.tool_calls", "tool_calls must be a non-empty array"
            for call in calls:
                function = call.get("function") if isinstance(call, dict) else None
                if (not isinstance(function, dict) or not isinstance(call.get("id"), str)
                        or call.get("type") != "function" or not isinstance(function.get("name"), str)
                        or not isinstance(function.get("arguments"), str)):
                    return f"{where}.tool_calls", "each tool call needs id, type 'function', function {name, arguments}"
                pending.append(call["id"])
        elif not isinstance(content, (str, list)):
            return f"{where}.content", f"{where}: content must be a string or an array of parts"
    if pending:
        return "messages", f"tool_call_ids without response messages: {', '.join(pending)}"
    tools = request.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not tools:
            return "tools", "tools must be a non-empty array"
        for tool in tools:
            function = tool.get("function") if isinstance(tool, dict) else None
            if (not isinstance(function, dict) or tool.get("type") != "function"
                    or not FUNCTION_NAME.match(str(function.get("name", "")))
                    or not isinstance(function.get("parameters", {}), dict)):
                return "tools", "each tool must be {type: 'function', function: {name, parameters}}"
    choice = request.get("tool_choice")
    if choice is not None:
        if not tools:
            return "tool_choice", "tool_choice is only allowed when tools are specified"
        named = isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("function"), dict)
        if choice not in ("none", "auto", "required") and not named:
            return "tool_choice", "tool_choice must be none, auto, required or a named function"
    for key in ("max_tokens", "max_completion_tokens"):
        value = request.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            return key, f"{key} must be an integer of at least 1"
    temperature = request.get("temperature")
    if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, (int, float))
                                    or not 0 <= temperature <= 2):
        return "temperature", "temperature must be a number between 0 and 2"
    return None
