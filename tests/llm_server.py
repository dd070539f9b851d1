"""A real HTTP model server for tests: OpenAI, Ollama and Anthropic wire formats.

Usage::

    from tests.llm_server import LLMServer

    with LLMServer() as server:              # 127.0.0.1, a free port, a background thread
        spec = server.spec("normal")           # ModelSpec(provider="openai", base_url=server.url, …)
        ...                                    # call the gateway / a provider / `conclave run`
        server.count("normal")                 # requests received with model "normal"
        server.count("normal", stream=False)   # … of which non-streaming
        server.requests                        # [Recorded(path, wire, scenario, stream, headers, body)]
        server.connections                     # every TCP connection accepted: [(peer host, port)]

``LLMServer(reply=..., chunk_chars=8, hang_seconds=5.0, drip_delay=0.05,
retry_after="2", prompt_tokens=17, completion_tokens=42)``; ``reply`` is a str
or a callable ``(request body dict) -> str``. Endpoints: ``POST
/v1/chat/completions`` (OpenAI, SSE), ``POST /api/chat`` (Ollama, NDJSON),
``POST /v1/messages`` (Anthropic, SSE with event names). Streams use chunked
encoding and every event is flushed on its own, so chunk boundaries are real.
Reported usage is always ``prompt_tokens`` / ``completion_tokens`` (fixed
numbers, easy to tell from an estimate).

The SCENARIO is the request's ``model`` (unknown names behave as "normal"):

  normal            reply streamed in ``chunk_chars`` pieces, usage reported
  no-usage          like normal, never reports usage (streaming or not)
  usage-last        OpenAI: usage rides on the last content chunk
  crlf / cr         SSE / NDJSON lines end in CRLF / CR
  comments          ": keep-alive" comments, id: and retry: fields between events
  multiline-data    each event's JSON is split over two ``data:`` lines
  no-done           the stream ends cleanly without [DONE] / message_stop / done:true
  utf8-split        a CJK reply; each event's bytes are cut inside a multi-byte
                    character, written as two flushed writes 20 ms apart
  drip              pieces ``drip_delay`` apart (for cancellation tests)
  hang-first        stream: headers, then silence; non-streaming: normal reply
  keepalive-hang    stream: keep-alive comments forever, never an event
  hang-all          streaming and non-streaming both hang
  empty             stream: no text at all; non-streaming: normal reply
  error-first       stream: an error object/event before any text; non-streaming: normal
  break-mid         two pieces, then the connection drops mid-body
  stall-mid         two pieces, then silence
  rate-limit-then-ok       first request 429 with Retry-After = ``retry_after`` seconds
  rate-limit-date-then-ok  first request 429 with Retry-After as an HTTP date (+3 s)
  unavailable-then-ok      first request 503
  server-error      always 500
  auth              401; the error message ECHOES the key it received (x-api-key, api-key or Bearer)
  no-model          404 model not found
  overflow          400 context length exceeded
  bad-request       400 other
  redirect          307 to this same endpoint (a client that follows it sends a second request)
  leaky-401 / leaky-400 / leaky-500
                    that status; the error body holds ``LEAK_SENTENCE``, ``LEAK_SECRET`` and
                    the key it received (what must never reach a plan's readers)
  leaky-stream      stream: an error object inside a 200 stream, with the same leaks
                    (type ``invalid_request_error``: not retried); non-streaming: leaky-400
  echo-headers-then-ok
                    first request 500 whose message echoes every request header it received
                    (``authorization: Bearer <key>`` and configured ones); then normal

Hanging handlers wake up when the server stops. Run ``python -m tests.llm_server``
to serve on a free port until interrupted (prints the URL).
"""

from __future__ import annotations

import email.utils
import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from orchestrator.gateway.types import ModelSpec

DEFAULT_REPLY = "The board should ship the pilot first, measure churn for a quarter, then decide."
#: What the leaky-* scenarios put in their error bodies: a sentence to trace, and a token-like secret.
LEAK_SENTENCE = "Quartermaster Ondine ordered seven barrels of tar for the lighthouse"
LEAK_SECRET = "sk-upstream-LEAK-7f3a9c2e1b4d8f60"
UTF8_REPLY = "董事会的结论\uff1a先试点一个季度\uff0c再决定。🚀 Café ✓"  # full-width colon and comma
WIRES = {"/v1/chat/completions": "openai", "/api/chat": "ollama", "/v1/messages": "anthropic"}


@dataclass(frozen=True)
class Recorded:
    path: str
    wire: str
    scenario: str
    stream: bool
    headers: dict[str, str]  # lower-cased names
    body: dict[str, Any] = field(repr=False)


class _ClientGone(Exception):
    pass


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: LLMServer

    def verify_request(self, request: Any, client_address: Any) -> bool:
        with self.owner._lock:  # every accepted connection, before anything is read from it
            self.owner._connections.append(tuple(client_address[:2]))
        return True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # clients hang up: that is the point
            super().handle_error(request, client_address)


class LLMServer:
    def __init__(
        self,
        reply: str | Callable[[dict[str, Any]], str] = DEFAULT_REPLY,
        *,
        chunk_chars: int = 8,
        hang_seconds: float = 5.0,
        drip_delay: float = 0.05,
        retry_after: str = "2",
        prompt_tokens: int = 17,
        completion_tokens: int = 42,
    ) -> None:
        self.reply = reply
        self.chunk_chars = chunk_chars
        self.hang_seconds = hang_seconds
        self.drip_delay = drip_delay
        self.retry_after = retry_after
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._log: list[Recorded] = []
        self._connections: list[tuple[str, int]] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ public API
    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def requests(self) -> list[Recorded]:
        with self._lock:
            return list(self._log)

    @property
    def connections(self) -> list[tuple[str, int]]:
        with self._lock:
            return list(self._connections)

    def count(self, scenario: str | None = None, *, stream: bool | None = None) -> int:
        return sum(
            1
            for r in self.requests
            if (scenario is None or r.scenario == scenario) and (stream is None or r.stream == stream)
        )

    def spec(self, scenario: str = "normal", provider: str = "openai", **overrides: Any) -> ModelSpec:
        """A ModelSpec aimed at this server with test-sized timeouts (trusted, like a
        registered model, unless ``trusted=False`` is given)."""
        values: dict[str, Any] = {
            "name": scenario,
            "provider": provider,
            "model": scenario,
            "base_url": self.url,
            "first_chunk_timeout": 0.5,
            "idle_timeout": 0.5,
            "deadline": 5.0,
            "max_retries": 2,
            "trusted": True,  # an operator's model: loopback is where the tests' servers live
        }
        values.update(overrides)
        return ModelSpec(**values)

    def start(self) -> LLMServer:
        handler = type("Handler", (_Handler,), {"owner": self})
        self._httpd = _HTTPServer(("127.0.0.1", 0), handler)
        self._httpd.owner = self
        # A client that connects and dies at once (a SIGKILLed worker) can make accept()
        # block after select() said ready; a timeout turns that into a skipped request
        # instead of a server (and a test teardown) that never stops.
        self._httpd.socket.settimeout(1.0)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.05,), name="llm-test-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> LLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ internals
    def _record(self, entry: Recorded) -> int:
        """Logs a request; returns how many requests this scenario has had, this one included."""
        with self._lock:
            self._log.append(entry)
            return sum(1 for r in self._log if r.scenario == entry.scenario)

    def _reply_for(self, scenario: str, body: dict[str, Any]) -> str:
        if scenario == "utf8-split":
            return UTF8_REPLY
        return self.reply(body) if callable(self.reply) else self.reply


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: LLMServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def do_POST(self) -> None:
        server = self.owner
        wire = WIRES.get(self.path.split("?")[0])
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if wire is None:
            self._json(404, {"error": f"no route {self.path}"})
            return
        body = json.loads(raw or b"{}")
        scenario = str(body.get("model") or "normal")
        streaming = bool(body.get("stream", wire == "ollama"))  # Ollama streams unless told not to
        headers = {k.lower(): v for k, v in self.headers.items()}
        nth = server._record(Recorded(self.path, wire, scenario, streaming, headers, body))
        try:
            if self._error(wire, scenario, nth, headers, streaming):
                return
            if not streaming:
                if scenario == "hang-all":
                    server.stopping.wait(server.hang_seconds)
                self._json(200, _complete(wire, scenario, server._reply_for(scenario, body), server))
                return
            self._stream(wire, scenario, body)
        except _ClientGone:
            self.close_connection = True

    # ------------------------------------------------------------------ errors
    def _error(self, wire: str, scenario: str, nth: int, headers: dict[str, str], streaming: bool) -> bool:
        server = self.owner
        extra: dict[str, str] = {}
        if scenario == "rate-limit-then-ok" and nth == 1:
            status, kind, message = 429, "rate_limit", "Rate limit reached for requests"
            extra["Retry-After"] = server.retry_after
        elif scenario == "rate-limit-date-then-ok" and nth == 1:
            status, kind, message = 429, "rate_limit", "Rate limit reached for requests"
            extra["Retry-After"] = email.utils.formatdate(time.time() + 3, usegmt=True)
        elif scenario == "unavailable-then-ok" and nth == 1:
            status, kind, message = 503, "overloaded", "The server is overloaded"
        elif scenario == "echo-headers-then-ok" and nth == 1:
            status, kind = 500, "server"
            message = "Internal error handling " + "; ".join(f"{k}: {v}" for k, v in sorted(headers.items()))
        elif scenario == "server-error":
            status, kind, message = 500, "server", "Internal server error"
        elif scenario == "auth":
            key = (headers.get("x-api-key") or headers.get("api-key")
                   or headers.get("authorization", "").removeprefix("Bearer "))
            status, kind, message = 401, "auth", f"Incorrect API key provided: {key}."
        elif scenario == "no-model":
            status, kind, message = 404, "model", f"The model `{scenario}` does not exist"
        elif scenario == "overflow":
            status, kind = 400, "overflow"
            message = "This model's maximum context length is 8192 tokens; your messages resulted in 9000"
        elif scenario == "bad-request":
            status, kind, message = 400, "invalid", "Invalid value for 'temperature'"
        elif scenario in ("leaky-401", "leaky-400", "leaky-500") or (scenario == "leaky-stream" and not streaming):
            status = 400 if scenario == "leaky-stream" else int(scenario.removeprefix("leaky-"))
            kind = {401: "auth", 400: "invalid", 500: "server"}[status]
            message = _leak(headers)
        elif scenario == "redirect":
            status, kind, message = 307, "redirect", "moved"
            extra["Location"] = f"{server.url}{self.path}"
        else:
            return False
        self._json(status, _error_body(wire, kind, message), extra)
        return True

    # ------------------------------------------------------------------ streaming
    def _stream(self, wire: str, scenario: str, body: dict[str, Any]) -> None:
        server = self.owner
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson" if wire == "ollama" else "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self._write(b"")  # headers out now: the client has its 200 before the first event
        if scenario in ("hang-first", "hang-all"):
            server.stopping.wait(server.hang_seconds)
            self._drop()
            return
        if scenario == "keepalive-hang":
            end = time.monotonic() + server.hang_seconds
            while time.monotonic() < end and not server.stopping.wait(0.05):
                self._chunk(b": keep-alive\n\n" if wire != "ollama" else b"\n")
            self._drop()
            return
        text = server._reply_for(scenario, body)
        pieces = [text[i : i + server.chunk_chars] for i in range(0, len(text), server.chunk_chars)]
        if scenario == "empty":
            pieces = []
        include_usage = scenario != "no-usage" and (
            wire != "openai" or bool((body.get("stream_options") or {}).get("include_usage"))
        )
        events = _events(wire, scenario, pieces, include_usage, server)
        cut_at = {"openai": 3, "anthropic": 5, "ollama": 2}[wire]  # after two text pieces
        for index, event in enumerate(events):
            if scenario in ("break-mid", "stall-mid") and index == cut_at:
                if scenario == "stall-mid":
                    server.stopping.wait(server.hang_seconds)
                self._drop()
                return
            self._emit(event, scenario)
            if scenario == "drip":
                time.sleep(server.drip_delay)
        self._chunk(b"", final=True)

    def _emit(self, event: bytes, scenario: str) -> None:
        if scenario == "utf8-split":
            cut = next((i + 1 for i, b in enumerate(event) if b >= 0xC0), None)
            if cut is not None:
                self._chunk(event[:cut])
                time.sleep(0.02)
                self._chunk(event[cut:])
                return
        self._chunk(event)

    def _chunk(self, data: bytes, *, final: bool = False) -> None:
        if data:
            self._write(b"%x\r\n%s\r\n" % (len(data), data))
        if final:
            self._write(b"0\r\n\r\n")

    def _write(self, data: bytes) -> None:
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except OSError as exc:
            raise _ClientGone from exc

    def _drop(self) -> None:
        """Ends the connection without finishing the chunked body: the client sees a broken stream."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _json(self, status: int, payload: dict[str, Any], extra: dict[str, str] | None = None) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self._write(data)


# ---------------------------------------------------------------------- wire formats
def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def _sse(data: Any, scenario: str, event: str | None = None, seq: int = 0) -> bytes:
    text = _dumps(data) if not isinstance(data, str) else data
    lines = []
    if scenario == "comments":
        lines += [": keep-alive", f"id: {seq}", "retry: 3000"]
    if event:
        lines.append(f"event: {event}")
    if scenario == "multiline-data" and ", " in text:
        head, tail = text.split(", ", 1)
        lines += [f"data: {head},", f"data: {tail}"]
    else:
        lines.append(f"data: {text}")
    end = {"crlf": "\r\n", "cr": "\r"}.get(scenario, "\n")
    block = end.join(lines) + end + end
    if scenario == "comments":
        block = f":{end}{end}" + block  # a lone comment followed by a blank line dispatches nothing
    return block.encode()


def _events(wire: str, scenario: str, pieces: list[str], usage: bool, server: LLMServer) -> Iterator[bytes]:
    model = scenario
    counts = {"prompt": server.prompt_tokens, "completion": server.completion_tokens if pieces else 0}
    if wire == "openai":
        yield from _openai_events(model, scenario, pieces, usage, counts)
    elif wire == "anthropic":
        yield from _anthropic_events(model, scenario, pieces, usage, counts)
    else:
        yield from _ollama_events(model, scenario, pieces, usage, counts)


def _openai_events(
    model: str, scenario: str, pieces: list[str], usage: bool, counts: dict[str, int]
) -> Iterator[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {
            "id": "chatcmpl-test",
            "object": "chat.completion.chunk",
            "model": model,
            "choices": [choice],
        } | extra

    report = {
        "prompt_tokens": counts["prompt"],
        "completion_tokens": counts["completion"],
        "total_tokens": counts["prompt"] + counts["completion"],
    }
    if scenario == "error-first":
        yield _sse(
            {"error": {"message": "upstream stream failed", "type": "server_error", "code": None}}, scenario
        )
        return
    if scenario == "leaky-stream":
        yield _sse({"error": {"message": _leak({}), "type": "invalid_request_error", "code": None}}, scenario)
        return
    yield _sse(chunk({"role": "assistant", "content": ""}), scenario, seq=0)
    for seq, piece in enumerate(pieces, 1):
        last = scenario == "usage-last" and seq == len(pieces)
        extra = {"usage": report} if last and usage else {}
        yield _sse(chunk({"content": piece}, "stop" if last else None, **extra), scenario, seq=seq)
    if scenario != "usage-last":
        yield _sse(chunk({}, "stop"), scenario)
        if usage:
            yield _sse(
                {
                    "id": "chatcmpl-test",
                    "object": "chat.completion.chunk",
                    "model": model,
                    "choices": [],
                    "usage": report,
                },
                scenario,
            )
    if scenario != "no-done":
        yield _sse("[DONE]", scenario)


def _anthropic_events(
    model: str, scenario: str, pieces: list[str], usage: bool, counts: dict[str, int]
) -> Iterator[bytes]:
    start_usage = {"input_tokens": counts["prompt"], "output_tokens": 1} if usage else {}
    message: dict[str, Any] = {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "usage": start_usage,
    }
    yield _sse({"type": "message_start", "message": message}, scenario, "message_start")
    if scenario == "leaky-stream":
        error = {"type": "error", "error": {"type": "invalid_request_error", "message": _leak({})}}
        yield _sse(error, scenario, "error")
        return
    if scenario == "error-first":
        error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        yield _sse(error, scenario, "error")
        return
    yield _sse(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        scenario,
        "content_block_start",
    )
    yield _sse({"type": "ping"}, scenario, "ping")
    for seq, piece in enumerate(pieces, 1):
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}
        yield _sse(delta, scenario, "content_block_delta", seq)
    yield _sse({"type": "content_block_stop", "index": 0}, scenario, "content_block_stop")
    delta_usage = {"usage": {"output_tokens": counts["completion"]}} if usage else {}
    yield _sse(
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}} | delta_usage,
        scenario,
        "message_delta",
    )
    if scenario != "no-done":
        yield _sse({"type": "message_stop"}, scenario, "message_stop")


def _ollama_events(
    model: str, scenario: str, pieces: list[str], usage: bool, counts: dict[str, int]
) -> Iterator[bytes]:
    end = {"crlf": "\r\n", "cr": "\r"}.get(scenario, "\n")

    def line(obj: dict[str, Any]) -> bytes:
        return (_dumps(obj) + end).encode()

    if scenario == "error-first":
        yield line({"error": "an error was encountered while running the model"})
        return
    if scenario == "leaky-stream":
        yield line({"error": _leak({})})
        return
    for piece in pieces:
        yield line({"model": model, "message": {"role": "assistant", "content": piece}, "done": False})
    if scenario == "no-done":
        return
    final: dict[str, Any] = {
        "model": model,
        "message": {"role": "assistant", "content": ""},
        "done": True,
        "done_reason": "stop",
    }
    if usage:
        final |= {"prompt_eval_count": counts["prompt"], "eval_count": counts["completion"]}
    yield line(final)


def _complete(wire: str, scenario: str, text: str, server: LLMServer) -> dict[str, Any]:
    usage = scenario != "no-usage"
    prompt, completion = server.prompt_tokens, server.completion_tokens
    if wire == "openai":
        body: dict[str, Any] = {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "model": scenario,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            ],
        }
        if usage:
            body["usage"] = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
        return body
    if wire == "anthropic":
        body = {
            "id": "msg_test",
            "type": "message",
            "role": "assistant",
            "model": scenario,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
        }
        if usage:
            body["usage"] = {"input_tokens": prompt, "output_tokens": completion}
        return body
    body = {
        "model": scenario,
        "message": {"role": "assistant", "content": text},
        "done": True,
        "done_reason": "stop",
    }
    if usage:
        body |= {"prompt_eval_count": prompt, "eval_count": completion}
    return body


def _leak(headers: dict[str, str]) -> str:
    """An error message that must never reach a plan's readers: a traceable sentence, a
    secret of the server's and the key the request carried (servers do echo keys)."""
    key = (headers.get("x-api-key") or headers.get("api-key")
           or headers.get("authorization", "").removeprefix("Bearer ") or "none")
    return f"{LEAK_SENTENCE}. Upstream credential {LEAK_SECRET} rejected the key {key}."


def _error_body(wire: str, kind: str, message: str) -> dict[str, Any]:
    openai_codes = {
        "overflow": "context_length_exceeded",
        "model": "model_not_found",
        "auth": "invalid_api_key",
        "rate_limit": "rate_limit_exceeded",
    }
    anthropic_types = {
        "rate_limit": "rate_limit_error",
        "overloaded": "overloaded_error",
        "server": "api_error",
        "auth": "authentication_error",
        "model": "not_found_error",
        "overflow": "invalid_request_error",
        "invalid": "invalid_request_error",
    }
    if wire == "openai":
        return {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": openai_codes.get(kind),
            }
        }
    if wire == "anthropic":
        return {"type": "error", "error": {"type": anthropic_types[kind], "message": message}}
    return {"error": message}


if __name__ == "__main__":
    with LLMServer() as running:
        print(running.url, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
