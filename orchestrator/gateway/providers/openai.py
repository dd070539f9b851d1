"""OpenAI-compatible ``/v1/chat/completions`` provider.

Works with OpenAI and with the many servers that copy its wire format
(DeepSeek, vLLM, llama.cpp, LM Studio, DashScope compatible mode, …).

``base_url``: if it has no path (``https://api.openai.com``,
``https://api.deepseek.com``) ``/v1/chat/completions`` is appended; if it has a
path (``http://gpu:8000/v1``, ``https://dashscope.aliyuncs.com/compatible-mode/v1``)
only ``/chat/completions`` is; a URL already ending in ``/chat/completions`` is
used as is. The default is ``https://api.openai.com/v1``.

Only the wire format is here: the constructor, ``stream()``, the POSTs, the key and the error
mapping are :class:`~orchestrator.gateway.providers.http_provider.HttpProvider`'s.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from itertools import chain
from typing import Any

from orchestrator.gateway.failures import ProviderUnavailable
from orchestrator.gateway.providers.http import api_key, endpoint, extra_headers, secrets_of, stream_error
from orchestrator.gateway.providers.http_provider import HttpProvider, HttpRequest
from orchestrator.gateway.providers.sse import SSEDecoder
from orchestrator.gateway.tokens import estimate_usage
from orchestrator.gateway.types import ChatRequest, Completion, ModelSpec, StreamEvent, TextDelta, Usage, UsageReport

logger = logging.getLogger(__name__)


class OpenAIProvider(HttpProvider):
    """``/v1/chat/completions``. No ``api_key_env`` is allowed only with an explicit
    ``base_url`` (a local server without auth)."""

    name = "openai"
    default_base_url = "https://api.openai.com/v1"

    @classmethod
    def key_required(cls, spec: ModelSpec) -> bool:
        return spec.base_url is None  # the default: OpenAI's own API

    def http_request(self, spec: ModelSpec, request: ChatRequest, *, streaming: bool) -> HttpRequest:
        secret = api_key(spec, required=self.key_required(spec))
        url = endpoint(spec.base_url or self.default_base_url, "/v1", "/chat/completions")
        headers = {"Accept": "text/event-stream" if streaming else "application/json"}
        if secret:
            headers["Authorization"] = f"Bearer {secret}"
        body: dict[str, Any] = {
            "model": spec.model,
            "messages": [{"role": m.role, "content": m.content} for m in request.messages()],
            "max_tokens": spec.max_output_tokens,
        }
        if spec.temperature is not None:
            body["temperature"] = spec.temperature
        body.update(spec.options)
        if "max_completion_tokens" in spec.options:
            body.pop("max_tokens")  # newer OpenAI models accept only this one
        if streaming:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        extra = extra_headers(spec)
        headers.update(extra)
        return self._request(spec, url, headers, body, secrets_of(secret, extra))

    def events(self, chunks: Iterator[bytes], sent: HttpRequest) -> Iterator[StreamEvent]:
        """One loop over the body's reads, each chunk's JSON handled in place: a streamed
        chunk costs a decode, a ``json.loads`` and its ``TextDelta``, no generator of its own."""
        decoder, secret = SSEDecoder(), sent.secret
        try:
            for chunk in chain(chunks, (None,)):  # None: the body ended, flush the decoder
                for event in decoder.feed(chunk) if chunk is not None else decoder.flush():
                    data = event.data
                    if data == "[DONE]" or (not data.startswith("{") and data.strip() == "[DONE]"):
                        return
                    parsed = json.loads(data)
                    if not isinstance(parsed, dict):
                        continue
                    if "error" in parsed:  # some compatible servers report failures inside the stream
                        raise stream_error("openai", parsed, secret)
                    for choice in parsed.get("choices") or ():
                        content = (choice.get("delta") or {}).get("content")
                        if content:
                            yield TextDelta(content)
                    if parsed.get("usage") is not None:
                        usage = _usage(parsed["usage"])
                        if usage is not None:
                            yield UsageReport(usage)
        except ValueError as exc:
            raise ProviderUnavailable("openai sent an event whose data is not JSON") from exc

    def completion(self, data: Any, sent: HttpRequest, request: ChatRequest) -> Completion:
        try:
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ProviderUnavailable("openai response has no choices[0].message") from exc
        usage = _usage(data.get("usage")) or estimate_usage(request, text)
        return Completion(text=text, usage=usage, finish_reason=choice.get("finish_reason"))


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    prompt, completion = raw.get("prompt_tokens"), raw.get("completion_tokens")
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    return Usage(prompt, completion, "provider")
