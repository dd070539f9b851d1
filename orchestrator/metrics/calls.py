"""The gateway hook that measures model calls (:class:`MeasureCalls`), beside the hooks that
write usage rows, hold the budget and stop cancelled calls (``tasks.hooks``)."""

from __future__ import annotations

from orchestrator.gateway.model_gateway import Attempt, CallHook
from orchestrator.gateway.types import ChatRequest, ModelSpec
from orchestrator.metrics.recorder import Recorder

OK = "ok"


class MeasureCalls(CallHook):
    """Every attempt the gateway makes (summaries and retries included): its latency and
    outcome, the time to its first text, its tokens by who counted them — the same figure
    its usage row stores — and whether it was retried, fell back or was truncated."""

    def __init__(self, recorder: Recorder) -> None:
        self._r = recorder

    def after_attempt(self, spec: ModelSpec, request: ChatRequest, attempt: Attempt) -> None:
        r = self._r
        provider, model = r.model_labels(spec)
        r.call_seconds.labels(provider, model, attempt.error.code if attempt.error else OK).observe(attempt.seconds)
        if attempt.first_text is not None:
            r.first_chunk_seconds.labels(provider, model).observe(attempt.first_text)
        if attempt.usage is not None:
            source = "provider" if attempt.usage.source == "provider" else "estimated"
            r.tokens.labels(provider, model, source, "input").inc(attempt.usage.input_tokens)
            r.tokens.labels(provider, model, source, "output").inc(attempt.usage.output_tokens)
        if attempt.retry_in is not None and attempt.error is not None:
            r.retries.labels(provider, model, attempt.error.code).inc()
        done = attempt.completion
        if done is not None and done.fallback:
            r.fallbacks.labels(provider, model, done.fallback_reason or "unknown").inc()
        if done is not None and done.truncated:
            r.truncations.labels(provider, model, done.finish_reason or "unknown").inc()
