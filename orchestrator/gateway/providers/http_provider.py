"""What every network provider does the same way: :class:`HttpProvider`.

A provider over HTTP differs from the others only in its wire format: the request it
builds (URL, headers, body: :meth:`HttpProvider.http_request`), how its streamed body
becomes events (:meth:`HttpProvider.events`) and how its JSON answer becomes a
completion (:meth:`HttpProvider.completion`), with its own usage and error shapes.
Everything else is here, once:

* ``stream()`` returns an :class:`HttpEventStream`: lazy (nothing is sent before its
  first ``next()``, which the guard makes on its producer thread), closable like the
  generator it wraps, and abortable from any thread (``abort()`` shuts the socket down,
  which wakes a read blocked in ``iter_bytes``); every blocking read is also bounded by
  an httpx read timeout as a second line of defence;
* ``complete()`` is one POST bounded by ``spec.deadline``;
* both send one :class:`HttpRequest` — what the provider built — through
  :func:`~orchestrator.gateway.providers.http.aim` (egress) and the pooled client of its
  destination, refuse redirects and map every failure
  (:mod:`orchestrator.gateway.providers.http`).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx

from orchestrator.gateway.failures import ProviderUnavailable, StreamStalled
from orchestrator.gateway.providers.http import (
    Secrets,
    aim,
    client,
    error_from_response,
    error_from_transport,
    refuse_redirect,
    timeouts,
)
from orchestrator.gateway.types import ChatRequest, Completion, ModelSpec, StreamEvent


@dataclass(frozen=True)
class HttpRequest:
    """One POST of a model call, as its provider built it."""

    provider: str  # the provider's name, in messages
    spec: ModelSpec
    url: str
    headers: dict[str, str]
    body: dict[str, Any]
    secret: Secrets  # what an upstream body is redacted of
    transport: httpx.BaseTransport | None  # a test's own transport; None: the pooled client


class HttpProvider:
    """Base class of the network providers; a subclass says only what differs."""

    name: ClassVar[str]
    default_base_url: ClassVar[str]

    def __init__(self, *, transport: httpx.BaseTransport | None = None) -> None:
        self._transport = transport

    @classmethod
    def key_required(cls, spec: ModelSpec) -> bool:
        """Whether a call of ``spec`` cannot go without ``api_key_env`` (a key set in it
        is always sent; :mod:`orchestrator.gateway.credentials` asks this before a run)."""
        return False

    def stream(self, spec: ModelSpec, request: ChatRequest) -> HttpEventStream:
        return HttpEventStream(lambda handle: self._events(handle, spec, request))

    def complete(self, spec: ModelSpec, request: ChatRequest) -> Completion:
        sent = self.http_request(spec, request, streaming=False)
        return self.completion(_post_json(sent), sent, request)

    def _events(self, handle: HttpEventStream, spec: ModelSpec, request: ChatRequest) -> Iterator[StreamEvent]:
        sent = self.http_request(spec, request, streaming=True)
        chunks = _stream_body(handle, sent)
        try:
            yield from self.events(chunks, sent)
        finally:
            chunks.close()

    def _request(self, spec: ModelSpec, url: str, headers: dict[str, str], body: dict[str, Any],
                 secret: Secrets) -> HttpRequest:
        return HttpRequest(self.name, spec, url, headers, body, secret, self._transport)

    # what each provider says for itself ------------------------------------------------------------
    def http_request(self, spec: ModelSpec, request: ChatRequest, *, streaming: bool) -> HttpRequest:
        """The POST for ``request``: its key and configured headers read now."""
        raise NotImplementedError

    def events(self, chunks: Iterator[bytes], sent: HttpRequest) -> Iterator[StreamEvent]:
        """The events of a streamed body (raw bytes as they arrive), errors mapped."""
        raise NotImplementedError

    def completion(self, data: Any, sent: HttpRequest, request: ChatRequest) -> Completion:
        """The completion of a non-streaming answer (its parsed JSON)."""
        raise NotImplementedError


class HttpEventStream:
    """The iterator a network provider's ``stream()`` returns.

    It behaves like the generator it wraps (``next``, ``close`` from the thread
    that iterates) and adds ``abort()``, which is safe from any thread: it shuts
    the socket of the in-flight response down so that a read blocked in
    ``iter_bytes`` returns at once. The generator is lazy: nothing is sent until
    the first ``next()``.
    """

    def __init__(self, events: Callable[[HttpEventStream], Iterator[StreamEvent]]) -> None:
        self._lock = threading.Lock()
        self._response: httpx.Response | None = None
        self._aborted = False
        self._events = events(self)

    def __iter__(self) -> Iterator[StreamEvent]:
        return self._events  # read directly, without a call of __next__ per event

    def __next__(self) -> StreamEvent:
        return next(self._events)

    def close(self) -> None:
        close = getattr(self._events, "close", None)
        if close is not None:
            close()

    @property
    def aborted(self) -> bool:
        return self._aborted

    def attach(self, response: httpx.Response) -> None:
        """Called by the generator once the response is open."""
        with self._lock:
            self._response = response
            aborted = self._aborted
        if aborted:
            _shutdown(response)

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            response = self._response
        if response is not None:
            _shutdown(response)

    def detach(self) -> bool:
        """The response is ending: its connection may go back to the pool, where an abort
        must not reach it (a late trip of the watchdog). True when an abort came first."""
        with self._lock:
            self._response = None
            return self._aborted


def _shutdown(response: httpx.Response) -> None:
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if sock is None:
        return
    try:
        # socket.socket.shutdown, not SSLSocket.shutdown: the latter also drops the
        # SSL object that the reading thread is still using.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


def _stream_body(handle: HttpEventStream, sent: HttpRequest) -> Generator[bytes, None, None]:
    """POSTs ``sent`` and yields raw body bytes, with errors mapped."""
    provider, spec = sent.provider, sent.spec
    url, headers, extensions = aim(spec, sent.url, sent.headers)
    try:
        with (
            client(url, extensions, sent.transport) as pooled,
            pooled.stream("POST", url, json=sent.body, headers=headers, extensions=extensions,
                          timeout=timeouts(spec, streaming=True)) as response,
        ):
            handle.attach(response)
            try:
                refuse_redirect(provider, response)
                if response.status_code >= 400:
                    raise error_from_response(provider, response, sent.secret)
                body_bytes = response.iter_bytes()
                try:
                    for piece in body_bytes:  # noqa: UP028  (`yield from` would close body_bytes on close())
                        yield piece
                except GeneratorExit:  # the provider read its end marker (or stopped reading)
                    if not handle.detach():
                        _finish(response, body_bytes)
                    raise
            finally:
                handle.detach()  # before the block ends and the connection may be pooled
    except httpx.TransportError as exc:
        if handle.aborted:
            raise StreamStalled(f"{provider} stream aborted") from None
        raise error_from_transport(provider, exc, sent.secret) from None


FINISH_SECONDS = 0.1  # what a finished stream may still take to end its body
FINISH_BYTES = 65536


def _finish(response: httpx.Response, body: Iterator[bytes]) -> None:
    """Read what is left of a body whose reader has stopped — after ``[DONE]`` that is the
    chunked encoding's last few bytes — so that its connection goes back to the pool;
    bounded in time and size, after which the connection is closed instead, as httpx
    does with an unfinished body."""
    timeout = response.request.extensions.get("timeout")
    if isinstance(timeout, dict):
        timeout["read"] = FINISH_SECONDS  # httpcore reads it before each read
    deadline, left = time.monotonic() + FINISH_SECONDS, FINISH_BYTES
    try:
        for piece in body:
            left -= len(piece)
            if left < 0 or time.monotonic() > deadline:
                return
    except httpx.HTTPError:
        return


def _post_json(sent: HttpRequest) -> Any:
    """A non-streaming POST, bounded by ``spec.deadline``; returns the parsed JSON."""
    provider = sent.provider
    url, headers, extensions = aim(sent.spec, sent.url, sent.headers)
    try:
        with client(url, extensions, sent.transport) as pooled:
            response = pooled.post(url, json=sent.body, headers=headers, extensions=extensions,
                                   timeout=timeouts(sent.spec, streaming=False))
            refuse_redirect(provider, response)
            if response.status_code >= 400:
                raise error_from_response(provider, response, sent.secret)
            return response.json()
    except httpx.TransportError as exc:
        raise error_from_transport(provider, exc, sent.secret) from None
    except ValueError as exc:
        raise ProviderUnavailable(f"{provider} returned a body that is not JSON") from exc
