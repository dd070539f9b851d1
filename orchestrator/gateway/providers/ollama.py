"""Ollama ``/api/chat`` provider (newline-delimited JSON stream).

``base_url`` is the server root (default ``http://127.0.0.1:11434``); a URL
ending in ``/api`` works too. No key is needed; if ``api_key_env`` is set (an
Ollama behind an authenticating proxy) it is sent as a Bearer token.

Usage comes from ``prompt_eval_count`` / ``eval_count`` on the final
``done: true`` object. Ollama omits ``prompt_eval_count`` when the prompt was
served from its cache; then no provider usage is reported and the guard
estimates it (labelled as such) rather than inventing a zero.

``options.num_ctx`` is set to ``spec.context_window`` (unless ``spec.options``
says otherwise): Ollama's small default window would otherwise silently cut the
request that the context budget measured against the configured window.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Iterator
from typing import Any

from orchestrator.gateway.failures import ProviderUnavailable
from orchestrator.gateway.providers.http import Secrets, api_key, endpoint, extra_headers, secrets_of, stream_error
from orchestrator.gateway.providers.http_provider import HttpProvider, HttpRequest
from orchestrator.gateway.providers.sse import NDJSONDecoder
from orchestrator.gateway.tokens import estimate_usage
from orchestrator.gateway.types import ChatRequest, Completion, ModelSpec, StreamEvent, TextDelta, Usage, UsageReport

logger = logging.getLogger(__name__)

_TOP_LEVEL = frozenset({"format", "keep_alive", "think", "tools"})  # spec.options keys sent beside "options"


class OllamaProvider(HttpProvider):
    name = "ollama"
    default_base_url = "http://127.0.0.1:11434"

    def http_request(self, spec: ModelSpec, request: ChatRequest, *, streaming: bool) -> HttpRequest:
        secret = api_key(spec, required=False)
        url = endpoint(spec.base_url or self.default_base_url, "/api", "/chat")
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        options: dict[str, Any] = {"num_predict": spec.max_output_tokens, "num_ctx": spec.context_window}
        if spec.temperature is not None:
            options["temperature"] = spec.temperature
        body: dict[str, Any] = {
            "model": spec.model,
            "messages": [{"role": m.role, "content": m.content} for m in request.messages()],
            "stream": streaming,
        }
        for key, value in spec.options.items():
            if key in _TOP_LEVEL:
                body[key] = value
            else:
                options[key] = value
        body["options"] = options
        extra = extra_headers(spec)
        headers.update(extra)
        return self._request(spec, url, headers, body, secrets_of(secret, extra))

    def events(self, chunks: Iterator[bytes], sent: HttpRequest) -> Iterator[StreamEvent]:
        decoder, secret = NDJSONDecoder(), sent.secret
        try:
            for chunk in chunks:
                for data in decoder.feed(chunk):
                    if (yield from _ollama_events(data, secret)):
                        return
            for data in decoder.flush():
                if (yield from _ollama_events(data, secret)):
                    return
        except ValueError as exc:
            raise ProviderUnavailable("ollama sent a line that is not JSON") from exc

    def completion(self, data: Any, sent: HttpRequest, request: ChatRequest) -> Completion:
        if not isinstance(data, dict) or "message" not in data:
            if isinstance(data, dict) and "error" in data:
                raise stream_error(self.name, data, sent.secret)
            raise ProviderUnavailable("ollama response has no message")
        text = str((data.get("message") or {}).get("content") or "")
        usage = _usage(data) or estimate_usage(request, text)
        return Completion(text=text, usage=usage, finish_reason=data.get("done_reason"))


def _ollama_events(data: Any, secret: Secrets) -> Generator[StreamEvent, None, bool]:
    """Yields the events of one NDJSON object; returns True on the final ``done`` object."""
    if not isinstance(data, dict):
        return False
    if "error" in data:
        raise stream_error("ollama", data, secret)
    content = (data.get("message") or {}).get("content")
    if content:
        yield TextDelta(str(content))
    if data.get("done"):
        usage = _usage(data)
        if usage is not None:
            yield UsageReport(usage)
        return True
    return False


def _usage(data: dict[str, Any]) -> Usage | None:
    prompt, output = data.get("prompt_eval_count"), data.get("eval_count")
    if not isinstance(prompt, int) or not isinstance(output, int):
        return None
    return Usage(prompt, output, "provider")
