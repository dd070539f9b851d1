"""A real webhook receiver for tests, on 127.0.0.1, that verifies every request with the
snippet docs/api.md gives receivers ("Verifying a delivery"), run as written.

    receiver = Receiver(secrets, now=clock.unix).start()
    receiver.answer = 500             # every request is answered 500 (default 200) …
    receiver.reply = b"…"             # … with this body (default none)
    receiver.hold = True              # requests wait (unanswered) until ``release()`` or stop()
    receiver.lose = 2                 # the next 2 are acted on, then dropped unanswered (a lost answer)
    receiver.stop()                   # refuses connections from now on (the port is closed) …
    receiver.start()                  # … and serves again, on the same port
    receiver.requests                 # every request: Received(delivery, event, attempt, body, valid, answered)
    receiver.handled                  # delivery id -> body, once per Conclave-Delivery, as the snippet's receive()

``secrets`` is the list of secrets the receiver accepts (a test adds the one a registration
returns; a rotation may add another); ``now`` is the receiver's clock in Unix seconds (tests
that move the courier's clock move this one too; None: the real clock).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.conftest import ROOT, free_port
from tests.doc_blocks import blocks

API_DOC = ROOT / "docs" / "api.md"


def documented_receiver() -> dict[str, Any]:
    """The namespace of docs/api.md's receiver snippet (``verify``, ``receive``, ``seen``,
    ``TOLERANCE``), executed as written."""
    [block] = [b for b in blocks(API_DOC) if b.lang == "python" and "Verifying a delivery" in b.headings]
    namespace: dict[str, Any] = {}
    exec(compile(block.text, block.where, "exec"), namespace)  # the documentation's own code, as written
    return namespace


@dataclass(frozen=True)
class Received:
    delivery: str
    event: str
    attempt: int
    signature: str
    body: bytes
    valid: bool  # the documented verify() accepted it
    answered: int | None  # the status it was answered with; None: never answered (held, then dropped)

    def json(self) -> Any:
        return json.loads(self.body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: Receiver


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        owner = self.server.owner
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        owner.on_request(self, body)


class Receiver:
    def __init__(self, secrets: list[str] | None = None, *, now: Callable[[], float] | None = None,
                 port: int | None = None) -> None:
        self.secrets = secrets if secrets is not None else []
        self.now = now
        self.port = port or free_port()
        self.answer = 200
        self.reply = b""  # what an answer's body says (a receiver's words: never stored or logged by Conclave)
        self.reply_headers: dict[str, str] = {}  # … and headers it adds
        self.hold = False
        self.lose = 0  # the next N valid requests are acted on, then the connection drops with no answer
        self.requests: list[Received] = []
        self.handled: dict[str, bytes] = {}
        self._doc = documented_receiver()
        self._lock = threading.Lock()
        self._released = threading.Event()
        self.arrived = threading.Event()  # set by every request, as it arrives
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/conclave"

    def start(self) -> Receiver:
        server = _Server(("127.0.0.1", self.port), _Handler)
        server.owner = self
        self._server = server
        self._released.clear()
        # stop()'s shutdown() waits for serve_forever to look at its flag, every poll interval
        # (0.5 s by default: half a second per test that stops a receiver)
        self._thread = threading.Thread(target=server.serve_forever, args=(0.02,), name="webhook-receiver",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close the port: connections are refused until :meth:`start`. Held requests end unanswered."""
        self._released.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def release(self) -> None:
        self._released.set()

    def verify(self, signature: str, body: bytes) -> bool:
        now = None if self.now is None else self.now()
        return any(self._doc["verify"](s, signature, body, now) for s in list(self.secrets))

    def on_request(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        headers = handler.headers
        signature = headers.get("Conclave-Signature", "")
        valid = self.verify(signature, body)
        delivery, event = headers.get("Conclave-Delivery", ""), headers.get("Conclave-Event", "")
        attempt = int(headers.get("Conclave-Attempt") or 0)
        self.arrived.set()
        if self.hold:
            self._released.wait(120)
            self._record(Received(delivery, event, attempt, signature, body, valid, None))
            return  # unanswered: the connection closes
        if valid and self.lose > 0:  # acted on, but the answer is lost on the way back
            with self._lock:
                self.lose -= 1
                self.handled.setdefault(delivery, body)
            self._record(Received(delivery, event, attempt, signature, body, valid, None))
            return
        status = self.answer if valid else 401
        if status == 200:
            with self._lock:
                self.handled.setdefault(delivery, body)  # once per Conclave-Delivery, as the snippet's receive()
        self._record(Received(delivery, event, attempt, signature, body, valid, status))
        handler.send_response(status)
        if 300 <= status < 400:  # back to itself: a client that followed it would POST again
            handler.send_header("Location", handler.path)
        for name, value in self.reply_headers.items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(self.reply)))
        handler.end_headers()
        handler.wfile.write(self.reply)

    def _record(self, received: Received) -> None:
        with self._lock:
            self.requests.append(received)

    def answered(self, status: int) -> list[Received]:
        with self._lock:
            return [r for r in self.requests if r.answered == status]
