"""An OpenAI-compatible model server for the benchmarks, meant to run in a process of its own
(so its CPU is never counted as a worker's).

``python bench/model_server.py [--chunks 64] [--interval 0.05]`` serves ``POST
/v1/chat/completions`` on 127.0.0.1 (a free port; the first line it prints is its URL) until it
is terminated. A streamed call (``stream: true``) answers at once with its headers, then sends
``--chunks`` content chunks on a fixed schedule — chunk i at ``(i + 1) x interval`` after the
request arrived, so a call lasts ``chunks x interval`` (3.2 s by default) however long writing
took — then a usage chunk (``stream_options.include_usage``) and ``data: [DONE]``. Every SSE
event is one flushed HTTP chunk.

Each content chunk's text is ``"t=<time.time() at send> "``: the wall-clock moment the chunk was
written to the socket, for a receiver on the same machine to compute its latency
(``bench/stream_latency.py``). A non-streamed call returns the same number of stamps at once.

``GET /stats`` answers ``{"calls": n, "streamed_seconds": s, "connections": c}``: streamed calls
finished so far, their summed duration (request read → last byte written) and the TCP
connections accepted (a client that keeps its connections alive opens few).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PROMPT_TOKENS, COMPLETION_TOKENS = 200, 64


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # 32 slots connecting at once must never wait for a SYN retry
    chunks = 64
    interval = 0.05

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.lock = threading.Lock()
        self.calls = 0
        self.streamed_seconds = 0.0
        self.connections = 0

    def verify_request(self, request: Any, client_address: Any) -> bool:
        with self.lock:
            self.connections += 1
        return True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client hanging up mid-stream is not the server's problem


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path != "/stats":
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        with self.server.lock:
            self._json(200, {"calls": self.server.calls, "streamed_seconds": self.server.streamed_seconds,
                             "connections": self.server.connections})

    def do_POST(self) -> None:
        started = time.monotonic()
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if not self.path.endswith("/chat/completions"):
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        model = str(body.get("model") or "bench")
        if not body.get("stream"):
            text = "".join(f"t={time.time():.6f} " for _ in range(self.server.chunks))
            self._json(200, {"id": "bench", "object": "chat.completion", "model": model,
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                          "finish_reason": "stop"}],
                             "usage": _usage()})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.wfile.flush()
        try:
            self._event(_chunk(model, {"role": "assistant", "content": ""}))
            for i in range(self.server.chunks):
                delay = started + (i + 1) * self.server.interval - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                self._event(_chunk(model, {"content": f"t={time.time():.6f} "}))
            self._event(_chunk(model, {}, "stop"))
            if (body.get("stream_options") or {}).get("include_usage"):
                self._event({"id": "bench", "object": "chat.completion.chunk", "model": model, "choices": [],
                             "usage": _usage()})
            self._write(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True
            return
        with self.server.lock:
            self.server.calls += 1
            self.server.streamed_seconds += time.monotonic() - started

    def _event(self, data: dict[str, Any]) -> None:
        self._write(b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n")

    def _write(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "bench", "object": "chat.completion.chunk", "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _usage() -> dict[str, int]:
    return {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
            "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS}


class ModelServer:
    """This module run as a subprocess in its own session: ``url``, ``stats()``, ``stop()``."""

    def __init__(self, chunks: int, interval: float) -> None:
        self.chunks, self.interval = chunks, interval
        self.proc = subprocess.Popen([sys.executable, __file__, "--chunks", str(chunks), "--interval", str(interval)],
                                     stdout=subprocess.PIPE, start_new_session=True)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().decode().strip()
        if not self.url.startswith("http://"):
            self.stop()
            raise RuntimeError("the model server did not start")

    @property
    def call_seconds(self) -> float:
        return self.chunks * self.interval

    def stats(self) -> dict[str, Any]:
        import httpx

        data: dict[str, Any] = httpx.get(f"{self.url}/stats", timeout=5).json()
        return data

    def registry(self, deadline: float = 120.0) -> str:
        """An operator's registry (CONCLAVE_MODELS) whose ``default`` model is this server."""
        return json.dumps({"models": {"default": {
            "provider": "openai", "model": "bench", "base_url": f"{self.url}/v1", "first_chunk_timeout": 30,
            "idle_timeout": 30, "deadline": deadline, "max_retries": 0}}})

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=64, help="content chunks per streamed call")
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between content chunks")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    _Server.chunks, _Server.interval = args.chunks, args.interval
    server = _Server(("127.0.0.1", args.port), _Handler)
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever(poll_interval=0.5)


if __name__ == "__main__":
    main()
