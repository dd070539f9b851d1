"""One delivery's POST: only where the operator allows, within a hard deadline, and what came
of it in our own words.

Where: :meth:`~orchestrator.gateway.egress.EgressPolicy.pin` of ``CONCLAVE_WEBHOOK_URLS`` —
the rules of plan-defined models: the URL checked again (the allowlist may have changed since
registration), the name resolved once, every address it resolves to checked (metadata,
unspecified, multicast and reserved never; loopback, private and link-local only when a
pattern writes that address), the connection made to the checked address, TLS still
verifying the name. Redirects are never followed (a 3xx is a failed attempt), and the
environment's proxies are ignored: a proxy would connect somewhere unchecked.

When: the connection has ``timeout`` to open and every read ``timeout`` to arrive, and the
whole request ``timeout`` at most — a receiver that answers a byte at a time has its socket
shut when that passes — so a courier holds a delivery no longer than its lease.

What came of it (:class:`Sent`): delivered on a 2xx; otherwise the status code and a reason
made of safe parts only — the standard phrase of the status, the kind of transport error,
the egress refusal. The receiver's body is never read: nothing it says is stored or logged.
Nor are httpx's and httpcore's own lines about the request (the URL, whose path may be a
credential; at DEBUG the receiver's status line and headers): they are dropped while a
delivery is sent.
"""

from __future__ import annotations

import logging
import socket
import threading
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import httpx

from orchestrator.gateway.egress import EgressPolicy, Resolver
from orchestrator.gateway.failures import EgressRefused, ProviderUnavailable

CONNECT_AT_MOST = 5.0
_sending = threading.local()


class _QuietWhileSending(logging.Filter):
    """Drops httpx's and httpcore's lines (the request line; at DEBUG the receiver's status
    line and headers) on a thread that is sending a delivery."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_sending, "active", False)


for _name in ("httpx", "httpcore.connection", "httpcore.http11", "httpcore.http2"):
    logging.getLogger(_name).addFilter(_QuietWhileSending())  # a filter, not a handler: entry points keep those


@dataclass(frozen=True)
class Sent:
    """What one attempt came to: ``delivered`` (a 2xx), else ``error`` says why in our words."""

    delivered: bool
    status_code: int | None = None
    error: str | None = None


class _Deadline:
    """Shuts the request's socket down once ``seconds`` have passed: the blocked read returns."""

    def __init__(self, seconds: float) -> None:
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._lock = threading.Lock()
        self._socket: Any = None
        self.expired = False

    def trace(self, name: str, info: dict[str, Any]) -> None:
        """httpcore's ``trace`` extension: keep the connection's socket when it is made."""
        if name.endswith("connect_tcp.complete"):
            stream = info.get("return_value")
            with self._lock:
                self._socket = stream.get_extra_info("socket") if stream is not None else None
                if self.expired:
                    _shut(self._socket)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            _shut(self._socket)

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._timer.cancel()


def _shut(sock: Any) -> None:
    if sock is None:
        return
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)  # not SSLSocket.shutdown: see http_provider._shutdown
    except OSError:
        pass


def send(policy: EgressPolicy, url: str, payload: bytes, headers: dict[str, str], *, timeout: float,
         resolve: Resolver | None = None) -> Sent:
    """POST ``payload`` to ``url`` where ``policy`` allows, within ``timeout`` seconds."""
    try:
        pinned = policy.pin(url, resolve=resolve)
    except EgressRefused as exc:
        return Sent(False, None, f"refused: {exc.message}")
    except ProviderUnavailable as exc:
        return Sent(False, None, exc.message)
    deadline = _Deadline(timeout)
    limits = httpx.Timeout(timeout, connect=min(timeout, CONNECT_AT_MOST))
    _sending.active = True
    try:
        with httpx.Client(follow_redirects=False, trust_env=False, timeout=limits) as client, deadline:
            request = client.build_request("POST", pinned.url, content=payload, headers={**headers, **pinned.headers},
                                           extensions={**pinned.extensions, "trace": deadline.trace})
            response = client.send(request, stream=True)
            response.close()  # the body is never read
    except httpx.HTTPError as exc:
        if deadline.expired or isinstance(exc, httpx.TimeoutException):
            return Sent(False, None, f"no answer within {timeout:g} s ({type(exc).__name__})")
        return Sent(False, None, f"{type(exc).__name__}: {_first_line(exc)}")
    finally:
        _sending.active = False
    status = response.status_code
    if 200 <= status < 300:
        return Sent(True, status)
    said = f"HTTP {status} {_phrase(status)}".rstrip()
    if 300 <= status < 400:
        return Sent(False, status, f"{said}: redirects are not followed")
    return Sent(False, status, said)


def _phrase(status: int) -> str:
    """The standard reason phrase of ``status`` (never the one the receiver sent)."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _first_line(exc: BaseException) -> str:
    """A transport error's own text (the OS's or the TLS library's words), bounded."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else "failed"
    return text[:160]
