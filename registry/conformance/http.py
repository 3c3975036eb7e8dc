"""A small client for talking to untrusted environment servers over HTTP and WebSocket.

Every error it raises is a `ProbeHTTPError` whose message is ready to be used
as evidence. The rules it keeps:

- the target's host must match an allowed pattern (fnmatch, e.g. `*.hf.space`,
  `127.0.0.1`), checked before any connection; URLs with credentials or a
  scheme other than http/https are refused;
- redirects are never followed: a 3xx comes back as a response and the
  WebSocket opening handshake refuses it (the socket is ours, so websockets
  cannot reconnect elsewhere);
- every request has a wall-clock deadline, enforced by a watchdog that shuts
  the socket down (a server trickling bytes cannot stretch it), and bodies are
  read up to a byte cap, uncompressed only;
- no proxy from the environment (`trust_env=False`, `proxy=None`), no
  keep-alive (each request gets a fresh, watched connection), no WebSocket
  compression.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Iterator
from urllib.parse import SplitResult, urlsplit, urlunsplit

import httpx
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException
from websockets.sync.client import ClientConnection, connect

DEFAULT_MAX_BODY_BYTES = 1024 * 1024


class ProbeHTTPError(Exception):
    """A request did not produce a usable answer; str(exc) is short evidence."""


class HostNotAllowed(ProbeHTTPError):
    """The target URL's host matches no allowed pattern (or the URL is not acceptable at all)."""


class RequestTimeout(ProbeHTTPError):
    """No complete answer within the deadline."""


class BodyTooLarge(ProbeHTTPError):
    """The answer is larger than the byte cap."""


class TransportFailed(ProbeHTTPError):
    """The connection could not be made or broke."""


class BadJSON(ProbeHTTPError):
    """The answer is not the JSON it should be."""


class WebSocketFailed(ProbeHTTPError):
    """The WebSocket could not be opened, was closed, or sent something unusable."""


def host_allowed(host: str, patterns: tuple[str, ...] | list[str]) -> bool:
    """Whether `host` matches one of the fnmatch patterns (case-insensitive, whole name)."""
    host = (host or "").lower().rstrip(".")
    return bool(host) and any(fnmatchcase(host, str(p).lower().rstrip(".")) for p in patterns)


def check_url(url: str, allowed_hosts: tuple[str, ...] | list[str]) -> SplitResult:
    """Parse a base URL and refuse it unless it is plain http(s) to an allowed host."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError as exc:
        raise HostNotAllowed(f"{url!r} is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise HostNotAllowed(f"{url!r}: only http and https URLs are probed")
    if parts.username is not None or parts.password is not None:
        raise HostNotAllowed(f"{url!r}: URLs with credentials are not probed")
    if parts.query or parts.fragment:
        raise HostNotAllowed(f"{url!r}: a base URL has no query or fragment")
    if not host_allowed(parts.hostname or "", allowed_hosts):
        raise HostNotAllowed(
            f"host {parts.hostname!r} is not allowed (allowed: {', '.join(allowed_hosts) or 'none'}); "
            "no connection was made"
        )
    return parts


def _abort(sock: socket.socket | None) -> None:
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed by the peer or by the client
    try:
        sock.close()
    except OSError:
        pass


@contextmanager
def _watchdog(timeout_s: float) -> Iterator[tuple[dict, threading.Event]]:
    """httpx trace extensions that shut a request's socket down when its wall-clock deadline passes.

    The same approach as openenv's validation transport: the trace hands us the
    freshly connected socket; a timer aborts it, which interrupts any blocked
    read or write (headers, body, TLS handshake).
    """
    expired = threading.Event()
    watched: list[socket.socket] = []

    def abort() -> None:
        expired.set()
        for sock in watched:
            _abort(sock)

    def trace(event: str, info: dict) -> None:
        if event in ("connection.connect_tcp.complete", "connection.connect_unix_socket.complete"):
            sock = info["return_value"].get_extra_info("socket")
            if sock is not None:
                watched.append(sock.dup())
                if expired.is_set():
                    abort()

    timer = threading.Timer(max(0.0, timeout_s), abort)
    timer.daemon = True
    timer.start()
    try:
        yield {"trace": trace}, expired
    finally:
        timer.cancel()
        for sock in watched:
            try:
                sock.close()
            except OSError:
                pass


def snippet(body: bytes | str, limit: int = 160) -> str:
    """The start of a body as one printable line."""
    text = body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else str(body)
    text = " ".join("".join(c if c.isprintable() else " " for c in text[: limit * 2]).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class Response:
    """A complete, capped HTTP answer."""

    method: str
    path: str
    status: int
    headers: dict[str, str]
    body: bytes
    elapsed_s: float

    @property
    def is_redirect(self) -> bool:
        return 300 <= self.status < 400

    @property
    def location(self) -> str:
        return self.headers.get("location", "")

    def json(self) -> Any:
        """The body as JSON, or BadJSON saying why not."""
        try:
            return json.loads(self.body.decode("utf-8"))
        except UnicodeDecodeError:
            raise BadJSON(f"{self.method} {self.path} -> {self.status}: body is not UTF-8") from None
        except json.JSONDecodeError as exc:
            raise BadJSON(
                f"{self.method} {self.path} -> {self.status}: body is not JSON ({exc.msg}): {snippet(self.body, 80)!r}"
            ) from None
        except RecursionError:
            raise BadJSON(f"{self.method} {self.path} -> {self.status}: JSON nested too deeply") from None
        except ValueError as exc:  # e.g. an integer longer than Python converts
            raise BadJSON(f"{self.method} {self.path} -> {self.status}: unusable JSON ({snippet(str(exc), 80)})") from None

    def describe(self, limit: int = 160) -> str:
        """`GET /health -> 503 {"status":"unhealthy"}`, with a redirect's target."""
        if self.is_redirect:
            return f"{self.method} {self.path} -> {self.status} redirect to {self.location or '?'} (not followed)"
        return f"{self.method} {self.path} -> {self.status} {snippet(self.body, limit)}".rstrip()


@dataclass
class ProbeClient:
    """HTTP and WebSocket access to one environment server (TCP or Unix socket)."""

    base_url: str
    allowed_hosts: tuple[str, ...]
    uds: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    user_agent: str = "openenv-hub-probe"
    _parts: SplitResult = field(init=False, repr=False)
    _client: httpx.Client | None = field(init=False, default=None, repr=False)
    _ssl_context: ssl.SSLContext | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        self.allowed_hosts = tuple(self.allowed_hosts)
        self._parts = check_url(self.base_url, self.allowed_hosts)
        self.base_url = urlunsplit((self._parts.scheme, self._parts.netloc, self._parts.path.rstrip("/"), "", ""))

    def __enter__(self) -> ProbeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _ssl(self) -> ssl.SSLContext:
        # One verifying context for HTTP and WebSocket alike.
        if self._ssl_context is None:
            self._ssl_context = ssl.create_default_context()
        return self._ssl_context

    def _http(self) -> httpx.Client:
        if self._client is None:
            verify = self._ssl() if self._parts.scheme == "https" and not self.uds else True
            transport = httpx.HTTPTransport(uds=self.uds, retries=0, verify=verify)
            self._client = httpx.Client(
                transport=transport,
                follow_redirects=False,
                trust_env=False,
                limits=httpx.Limits(max_keepalive_connections=0),
                headers={"Accept-Encoding": "identity", "User-Agent": self.user_agent},
            )
        return self._client

    def url(self, path: str) -> str:
        return self.base_url + path

    def request(
        self, method: str, path: str, *, timeout_s: float, json_body: Any = None, headers: dict[str, str] | None = None,
    ) -> Response:
        """One request with a wall-clock deadline and a body cap; never follows a redirect.

        `headers` go with this request only (an API key goes to the one host this client may reach, and a redirect,
        never followed, cannot carry it elsewhere).
        """
        if timeout_s <= 0:
            raise RequestTimeout(f"{method} {path}: no time left")
        started = time.monotonic()
        if self.uds:
            self._check_uds(method, path, timeout_s)
        kwargs: dict[str, Any] = {"timeout": httpx.Timeout(timeout_s), "headers": dict(headers or {})}
        if json_body is not None:
            kwargs["content"] = json.dumps(json_body).encode()
            kwargs["headers"]["Content-Type"] = "application/json"
        with _watchdog(timeout_s) as (extensions, expired):
            try:
                with self._http().stream(method, self.url(path), extensions=extensions, **kwargs) as response:
                    encoding = response.headers.get("content-encoding", "identity").strip().lower()
                    if encoding not in ("", "identity"):
                        raise TransportFailed(f"{method} {path} -> {response.status_code}: compressed body ({encoding}) refused")
                    body = bytearray()
                    for chunk in response.iter_raw():
                        body.extend(chunk)
                        if len(body) > self.max_body_bytes:
                            raise BodyTooLarge(
                                f"{method} {path} -> {response.status_code}: body larger than {self.max_body_bytes:,} bytes"
                            )
                    return Response(
                        method=method, path=path, status=response.status_code,
                        headers={k.lower(): v for k, v in response.headers.items()},
                        body=bytes(body), elapsed_s=time.monotonic() - started,
                    )
            except ProbeHTTPError:
                raise
            except (httpx.TimeoutException, httpx.TransportError, OSError) as exc:
                if expired.is_set() or isinstance(exc, httpx.TimeoutException):
                    raise RequestTimeout(f"{method} {path}: no complete answer within {timeout_s:.1f} s") from None
                raise TransportFailed(f"{method} {path}: {type(exc).__name__}: {snippet(str(exc), 120)}") from None
            except httpx.HTTPError as exc:
                raise TransportFailed(f"{method} {path}: {type(exc).__name__}: {snippet(str(exc), 120)}") from None

    def _check_uds(self, method: str, path: str, timeout_s: float) -> None:
        # httpcore leaks the socket when a Unix-socket connect fails (a server
        # still starting up); failing here first, with a socket we close, keeps
        # the startup poll from leaking one socket per attempt.
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout_s)
            sock.connect(self.uds)
        except OSError as exc:
            raise TransportFailed(f"{method} {path}: cannot connect to {self.uds}: {exc.strerror or exc}") from None
        finally:
            sock.close()

    def websocket(self, path: str, *, open_timeout_s: float, close_timeout_s: float = 1.0) -> WsSession:
        """Open a WebSocket to `path` on the same host (wss for https), redirects refused."""
        if open_timeout_s <= 0:
            raise WebSocketFailed(f"WebSocket {path}: no time left to connect")
        secure = self._parts.scheme == "https"
        ws_url = urlunsplit(("wss" if secure else "ws", self._parts.netloc, self._parts.path.rstrip("/") + path, "", ""))
        if self.uds:
            ws_url = urlunsplit(("ws", "localhost", self._parts.path.rstrip("/") + path, "", ""))
        deadline = time.monotonic() + open_timeout_s
        sock: socket.socket | None = None
        try:
            if self.uds:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(open_timeout_s)
                sock.connect(self.uds)
            else:
                port = self._parts.port or (443 if secure else 80)
                sock = socket.create_connection((self._parts.hostname, port), timeout=open_timeout_s)
            sock.settimeout(None)
            connection = connect(
                ws_url,
                sock=sock,
                ssl=self._ssl() if secure and not self.uds else None,
                server_hostname=self._parts.hostname if secure and not self.uds else None,
                compression=None,
                proxy=None,
                open_timeout=max(0.1, deadline - time.monotonic()),
                close_timeout=close_timeout_s,
                ping_interval=None,
                max_size=self.max_body_bytes,
                max_queue=4,
                user_agent_header=self.user_agent,
            )
        except TimeoutError:
            _abort(sock)
            raise WebSocketFailed(f"WebSocket {path}: not open within {open_timeout_s:.1f} s") from None
        except InvalidStatus as exc:
            _abort(sock)
            raise WebSocketFailed(f"WebSocket {path}: {_describe_invalid_status(exc)}") from None
        except (OSError, WebSocketException, ValueError) as exc:
            _abort(sock)
            cause = exc.__cause__ if isinstance(exc, ValueError) else None
            if isinstance(cause, InvalidStatus):
                raise WebSocketFailed(f"WebSocket {path}: {_describe_invalid_status(cause)}") from None
            raise WebSocketFailed(f"WebSocket {path}: {type(exc).__name__}: {snippet(str(exc), 120)}") from None
        # Entering the connection as a context manager marks it as managed
        # (websockets >= 17.1 otherwise warns about the legacy calling style).
        connection.__enter__()
        return WsSession(connection, path)


def _describe_invalid_status(exc: InvalidStatus) -> str:
    response = exc.response
    status = response.status_code
    if 300 <= status < 400:
        return f"upgrade answered {status} redirect to {response.headers.get('Location', '?')} (not followed)"
    return f"upgrade refused with HTTP {status} {snippet(response.body or b'', 80)}".rstrip()


@dataclass
class WsReply:
    """What came back for one frame sent: the text (when any), the parsed JSON, or the problem."""

    sent: Any
    text: str | None = None
    frame: Any = None
    problem: str | None = None
    latency_s: float = 0.0
    fatal: bool = False  # the session cannot be used any more (timeout, closed, oversized)

    @property
    def is_error_frame(self) -> bool:
        return isinstance(self.frame, dict) and self.frame.get("type") == "error"

    @property
    def error_code(self) -> str | None:
        data = self.frame.get("data") if isinstance(self.frame, dict) else None
        return data.get("code") if isinstance(data, dict) and isinstance(data.get("code"), str) else None

    @property
    def data(self) -> Any:
        return self.frame.get("data") if isinstance(self.frame, dict) else None

    def describe(self, limit: int = 160) -> str:
        if self.problem:
            return self.problem
        return snippet(self.text or "", limit)


class WsSession:
    """One WebSocket session: send a JSON frame, wait (bounded) for the JSON answer."""

    def __init__(self, connection: ClientConnection, path: str):
        self._connection = connection
        self.path = path
        self.closed = False
        self.closed_after_reply = False

    def exchange(self, frame: Any, *, timeout_s: float, raw: str | None = None) -> WsReply:
        """Send `frame` (or `raw` text) and wait up to `timeout_s` for one text frame."""
        reply = WsReply(sent=frame)
        if self.closed:
            reply.problem, reply.fatal = "the session is already closed", True
            return reply
        started = time.monotonic()
        try:
            try:
                self._connection.send(raw if raw is not None else json.dumps(frame))
            except ConnectionClosed:
                # A server may answer before we speak and close at once (CAPACITY_REACHED when its only session
                # is taken): what it said is still queued, and is its answer.
                message = self._connection.recv(timeout=0)
                self.closed_after_reply = True
            else:
                message = self._connection.recv(timeout=max(0.0, timeout_s))
        except TimeoutError:
            reply.problem, reply.fatal = f"no reply within {timeout_s:.1f} s", True
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd is not None else None
            reason = exc.rcvd.reason if exc.rcvd is not None else ""
            if code == 1009 or (exc.sent is not None and exc.sent.code == 1009):
                reply.problem = "the server sent a message larger than the probe's cap"
            else:
                reply.problem = f"the server closed the connection (code {code}{', ' + snippet(reason, 60) if reason else ''})"
            reply.fatal = True
        except (OSError, WebSocketException, RuntimeError) as exc:
            reply.problem, reply.fatal = f"{type(exc).__name__}: {snippet(str(exc), 100)}", True
        else:
            reply.latency_s = time.monotonic() - started
            if isinstance(message, bytes):
                reply.problem = f"binary frame ({len(message)} bytes) instead of JSON text"
                return reply
            reply.text = message
            try:
                reply.frame = json.loads(message)
            except (ValueError, RecursionError):  # not JSON, too deep, or an integer longer than Python converts
                reply.problem = f"reply is not usable JSON: {snippet(message, 80)!r}"
            if self.closed_after_reply:
                reply.fatal = True
                self.close()
            return reply
        reply.latency_s = time.monotonic() - started
        if reply.fatal:
            self.close()
        return reply

    def send_only(self, frame: Any) -> None:
        """Send without waiting (used for the final close frame); errors are ignored."""
        if self.closed:
            return
        try:
            self._connection.send(json.dumps(frame))
        except (OSError, WebSocketException, RuntimeError):
            pass  # the server may already have closed the socket

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._connection.__exit__(None, None, None)
        except Exception:  # noqa: BLE001 - closing is best effort; the socket is dropped either way
            pass
