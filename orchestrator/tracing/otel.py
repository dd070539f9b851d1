"""The OpenTelemetry side of tracing; imported only when ``conclave[otel]`` is installed and
``CONCLAVE_OTEL`` is on (:func:`orchestrator.tracing.setup`).

:class:`Tracing` owns the process's instrumentation: Celery (a task's run span is linked
to the span that sent it, not its child: a canvas outlives the request that started it),
httpx, SQLAlchemy (engines made after setup) and, per app, FastAPI. Its spans:

* ``phase <key>`` — one per claimed attempt, parented on the plan's remote span context
  (:mod:`orchestrator.tracing.trace_ids`), so every phase of a plan is in the plan's trace
  whichever worker runs it; linked to the Celery run span it ran in. Attributes
  ``conclave.plan_id``, ``conclave.phase.id``, ``conclave.phase.key``,
  ``conclave.phase.attempt``, ``conclave.phase.kind``, ``conclave.phase.outcome``.
* ``chat <model>`` — one per model call attempt (:class:`TraceCalls`, a gateway hook),
  the phase's child and the parent of the call's HTTP spans. Attributes
  ``gen_ai.provider.name``, ``gen_ai.request.model``, ``gen_ai.usage.input_tokens`` /
  ``output_tokens``, ``conclave.model``, ``conclave.llm.purpose``,
  ``conclave.llm.tokens_source`` (``provider`` / ``estimated``) and
  ``conclave.llm.outcome`` (``ok`` or the error's code).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from orchestrator.core.version import __version__
from orchestrator.gateway.failures import LLMError
from orchestrator.gateway.model_gateway import CallHook
from orchestrator.gateway.types import ChatRequest, ModelSpec, Usage
from orchestrator.tracing.trace_ids import plan_span_id, plan_trace_id

#: Not worth a span: probes and scrapes.
EXCLUDED_URLS = "healthz,readyz,metrics"


class Tracing:
    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("conclave", __version__)
        self._instrumentors: list[Any] = [CeleryInstrumentor(), HTTPXClientInstrumentor(), SQLAlchemyInstrumentor()]

    @classmethod
    def start(cls, service: str, provider: Any = None) -> Tracing:
        """Instrument this process. ``provider``: a tracer provider to use (tests give one
        with an in-memory exporter); else the global SDK provider if one is set (e.g. by
        ``opentelemetry-instrument``), else a new one exporting over OTLP as the standard
        ``OTEL_EXPORTER_OTLP_*`` variables say, which becomes the global provider."""
        if provider is None:
            provider = trace.get_tracer_provider()
            if not isinstance(provider, TracerProvider):
                provider = TracerProvider(resource=_resource(service))
                provider.add_span_processor(BatchSpanProcessor(_exporter()))
                trace.set_tracer_provider(provider)
        tracing = cls(provider)
        celery, httpx, sqlalchemy = tracing._instrumentors
        celery.instrument(tracer_provider=provider, use_span_links=True)
        httpx.instrument(tracer_provider=provider)
        # its declared range stops below SQLAlchemy 2.1, whose engine events it uses unchanged
        sqlalchemy.instrument(tracer_provider=provider, skip_dep_check=True)
        return tracing

    def stop(self) -> None:
        for instrumentor in self._instrumentors:
            instrumentor.uninstrument()
        self.provider.force_flush()

    def instrument_api(self, app: Any) -> None:
        FastAPIInstrumentor.instrument_app(app, tracer_provider=self.provider, excluded_urls=EXCLUDED_URLS)

    @contextmanager
    def phase(self, *, plan_id: str, phase_id: str, key: str, attempt: int, kind: str) -> Iterator[PhaseSpan]:
        plan = SpanContext(trace_id=plan_trace_id(plan_id), span_id=plan_span_id(plan_id), is_remote=True,
                           trace_flags=TraceFlags(TraceFlags.SAMPLED))
        running = trace.get_current_span().get_span_context()  # Celery's run span, when instrumented
        with self.tracer.start_as_current_span(
            f"phase {key}", context=trace.set_span_in_context(NonRecordingSpan(plan)),
            links=[Link(running)] if running.is_valid else [],
            attributes={"conclave.plan_id": plan_id, "conclave.phase.id": phase_id, "conclave.phase.key": key,
                        "conclave.phase.attempt": attempt, "conclave.phase.kind": kind},
        ) as span:
            yield PhaseSpan(span)

    def call_hook(self) -> TraceCalls:
        return TraceCalls(self.tracer)


class PhaseSpan:
    def __init__(self, span: Any) -> None:
        self._span = span

    def outcome(self, outcome: str) -> None:
        self._span.set_attribute("conclave.phase.outcome", str(outcome))
        if outcome == "failed":
            self._span.set_status(Status(StatusCode.ERROR, "the phase failed"))


class TraceCalls(CallHook):
    """A span per model call attempt (summaries and retries included), current while the
    call runs so that its HTTP requests are its children."""

    def __init__(self, tracer: Any) -> None:
        self._tracer = tracer
        self._open: list[tuple[Any, object]] = []

    def before_call(self, spec: ModelSpec, request: ChatRequest) -> None:
        model = spec.model or spec.name
        span = self._tracer.start_span(f"chat {model}", kind=SpanKind.CLIENT, attributes={
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": spec.provider, "gen_ai.request.model": model,
            "conclave.model": spec.name, "conclave.llm.purpose": request.purpose})
        self._open.append((span, otel_context.attach(trace.set_span_in_context(span))))

    def after_call(self, spec: ModelSpec, request: ChatRequest, usage: Usage | None,
                   error: LLMError | None) -> None:
        if not self._open:
            return
        span, token = self._open.pop()
        otel_context.detach(token)  # type: ignore[arg-type]
        if usage is not None:
            span.set_attributes({"gen_ai.usage.input_tokens": usage.input_tokens,
                                 "gen_ai.usage.output_tokens": usage.output_tokens,
                                 "conclave.llm.tokens_source": usage.source})
        span.set_attribute("conclave.llm.outcome", "ok" if error is None else error.code)
        if error is not None:
            span.set_attribute("error.type", error.code)
            span.set_status(Status(StatusCode.ERROR, error.code))
        span.end()


def _resource(service: str) -> Any:
    """``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` when set, else ``service``."""
    detected = Resource.create()
    if str(detected.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        detected = detected.merge(Resource({SERVICE_NAME: service}))
    return detected


def _exporter() -> Any:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()
