"""Anthropic Messages ``/v1/messages`` provider (SSE with named events).

``base_url`` is the server root (default ``https://api.anthropic.com``) or a URL
ending in ``/v1``. The key (``api_key_env`` is required) goes in ``x-api-key``,
with ``anthropic-version: 2023-06-01``. The system prompt is the top-level
``system`` field, not a message.

Usage: ``message_start`` carries the input tokens (cache writes and reads are
added in: they are input too), ``message_delta`` the cumulative output tokens;
one ``UsageReport`` is yielded when the message ends. An ``error`` event raises
the mapped ``LLMError`` carrying the usage reported up to that point.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from orchestrator.gateway.failures import LLMError, ProviderUnavailable
from orchestrator.gateway.providers.http import api_key, endpoint, extra_headers, secrets_of, stream_error
from orchestrator.gateway.providers.http_provider import HttpProvider, HttpRequest
from orchestrator.gateway.providers.sse import SSEDecoder, SSEEvent
from orchestrator.gateway.tokens import estimate_usage
from orchestrator.gateway.types import ChatRequest, Completion, ModelSpec, StreamEvent, TextDelta, Usage, UsageReport

logger = logging.getLogger(__name__)

API_VERSION = "2023-06-01"


class AnthropicProvider(HttpProvider):
    name = "anthropic"
    default_base_url = "https://api.anthropic.com"

    @classmethod
    def key_required(cls, spec: ModelSpec) -> bool:
        # a gateway may take the key in a configured header instead
        return "x-api-key" not in {h.lower() for h in spec.headers}

    def http_request(self, spec: ModelSpec, request: ChatRequest, *, streaming: bool) -> HttpRequest:
        secret = api_key(spec, required=self.key_required(spec))
        url = endpoint(spec.base_url or self.default_base_url, "/v1", "/messages")
        headers = {"anthropic-version": API_VERSION}
        if secret:
            headers["x-api-key"] = secret
        messages = [{"role": m.role, "content": m.content} for m in request.messages() if m.role != "system"]
        body: dict[str, Any] = {
            "model": spec.model,
            "max_tokens": spec.max_output_tokens,
            "messages": messages,
        }
        if request.system:
            body["system"] = request.system
        if spec.temperature is not None:
            body["temperature"] = spec.temperature
        body.update(spec.options)
        if streaming:
            body["stream"] = True
        extra = extra_headers(spec)
        headers.update(extra)
        return self._request(spec, url, headers, body, secrets_of(secret, extra))

    def events(self, chunks: Iterator[bytes], sent: HttpRequest) -> Iterator[StreamEvent]:
        start: dict[str, Any] | None = None  # message_start usage
        output: int | None = None
        try:
            for event in _decoded(chunks, SSEDecoder()):
                data = event.json()
                kind = data.get("type", event.event) if isinstance(data, dict) else event.event
                if kind == "message_start":
                    start = (data.get("message") or {}).get("usage") or {}
                    output = start.get("output_tokens")
                elif kind == "content_block_delta":
                    delta = data.get("delta") or {}
                    if delta.get("type") == "text_delta" and delta.get("text"):
                        yield TextDelta(str(delta["text"]))
                elif kind == "message_delta":
                    output = (data.get("usage") or {}).get("output_tokens", output)
                elif kind == "error":
                    error = stream_error(self.name, data, sent.secret)
                    error.usage = _usage(start, output)
                    raise error
                elif kind == "message_stop":
                    break
        except ValueError as exc:
            raise ProviderUnavailable(
                "anthropic sent an event whose data is not JSON", usage=_usage(start, output)
            ) from exc
        except LLMError as exc:  # a broken stream still spent what message_start reported
            if exc.usage is None:
                exc.usage = _usage(start, output)
            raise
        usage = _usage(start, output)
        if usage is not None:
            yield UsageReport(usage)

    def completion(self, data: Any, sent: HttpRequest, request: ChatRequest) -> Completion:
        if not isinstance(data, dict) or not isinstance(data.get("content"), list):
            raise ProviderUnavailable("anthropic response has no content")
        text = "".join(
            str(block.get("text", ""))
            for block in data["content"]
            if isinstance(block, dict) and block.get("type") == "text"
        )
        raw = data.get("usage") or {}
        usage = _usage(raw, raw.get("output_tokens")) or estimate_usage(request, text)
        return Completion(text=text, usage=usage, finish_reason=data.get("stop_reason"))


def _decoded(chunks: Iterator[bytes], decoder: SSEDecoder) -> Iterator[SSEEvent]:
    for chunk in chunks:
        yield from decoder.feed(chunk)
    yield from decoder.flush()


def _usage(start: dict[str, Any] | None, output: Any) -> Usage | None:
    if not start or not isinstance(start.get("input_tokens"), int) or not isinstance(output, int):
        return None
    cached = sum(
        v
        for k in ("cache_creation_input_tokens", "cache_read_input_tokens")
        if isinstance(v := start.get(k), int)
    )
    return Usage(start["input_tokens"] + cached, output, "provider")
