"""Issue 10, item 6: one trace per plan, a span per phase and per model call.

The API app (FastAPI, served by uvicorn in a thread) in embedded mode: SQLite and an
in-process Celery worker, tracing on with an in-memory exporter. The plan's models call the
test model server over HTTP, so every instrumented library takes part: FastAPI (the
submit), Celery (each task's run), SQLAlchemy (the phase's writes) and httpx (the model's
requests). Without the extra, or with ``CONCLAVE_OTEL`` off, tracing does nothing.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from orchestrator import tracing
from orchestrator.api import create_app
from orchestrator.core.settings import Settings
from orchestrator.gateway.providers import http as llm_http
from tests.conftest import free_port
from tests.llm_server import LLMServer


@pytest.fixture()
def exporter(monkeypatch: Any) -> Iterator[InMemorySpanExporter]:
    pooled: dict[Any, httpx.Client] = {}
    monkeypatch.setattr(llm_http, "_clients", pooled)  # this test's model connections, closed after it
    spans = InMemorySpanExporter()
    yield spans
    tracing.shutdown()
    for client in pooled.values():
        client.close()


def _plan(url: str, title: str) -> dict[str, Any]:
    return {
        "kind": "team", "title": title, "divergence": "lexical", "question": "Should we ship the pilot first?",
        "models": {"gpt": {"provider": "openai", "model": "normal", "base_url": url, "first_chunk_timeout": 10,
                           "idle_timeout": 10, "deadline": 30}},
        "experts": [{"name": "Ana", "role": "Analyst", "model": "gpt"},
                    {"name": "Ben", "role": "Critic", "model": "gpt"},
                    {"name": "Lead", "role": "Lead", "model": "gpt"}],
        "phases": [{"id": "costs", "expert": "Ana", "prompt": "Costs?"},
                   {"id": "risks", "expert": "Ben", "prompt": "Risks?"}],
        "synthesis": {"expert": "Lead"},
    }


@contextmanager
def _serving(app: Any) -> Iterator[httpx.Client]:
    """The app on a free port, served by uvicorn in a thread; a client of it."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the API did not start"
        time.sleep(0.05)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            yield client
    finally:
        server.should_exit = True
        thread.join(30)


def _run(client: httpx.Client, plan: dict[str, Any]) -> dict[str, Any]:
    r = client.post("/v1/plans", json=plan)
    assert r.status_code == 201, r.text
    plan_id = r.json()["plan_id"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        view: dict[str, Any] = client.get(f"/v1/plans/{plan_id}").json()
        if view["status"] != "running":
            return view
        time.sleep(0.05)
    raise AssertionError(f"plan {plan_id} did not end")


def _attr(span: ReadableSpan, key: str) -> Any:
    return (span.attributes or {}).get(key)


def test_one_trace_per_plan_with_a_span_per_phase_and_per_model_call(home: Path,
                                                                     exporter: InMemorySpanExporter) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    settings = Settings(home=home, offline_latency=0.0, reconcile_interval=0.5, otel=True)
    assert tracing.setup(settings, service="conclave-test", provider=provider)
    with LLMServer() as llm, _serving(create_app(settings)) as client:
        first = _run(client, _plan(llm.url, "First"))
        second = _run(client, _plan(llm.url, "Second"))
    provider.force_flush()
    spans = exporter.get_finished_spans()

    traces = set()
    for view in (first, second):
        assert view["status"] == "completed", view
        trace_id = uuid.UUID(view["id"]).int  # the plan's trace is its id
        traces.add(trace_id)
        phases = [s for s in spans if s.name.startswith("phase ") and _attr(s, "conclave.plan_id") == view["id"]]
        # one span per phase, all in the plan's trace, hanging from the plan's (unrecorded) span
        assert sorted(_attr(s, "conclave.phase.key") for s in phases) == sorted(p["key"] for p in view["phases"])
        assert {s.context.trace_id for s in phases} == {trace_id}
        assert {s.parent.span_id for s in phases if s.parent} == {tracing.plan_span_id(view["id"])}
        kinds = {p["key"]: p["kind"] for p in view["phases"]}
        for s in phases:
            key = _attr(s, "conclave.phase.key")
            assert (_attr(s, "conclave.phase.attempt"), _attr(s, "conclave.phase.kind"),
                    _attr(s, "conclave.phase.outcome"), s.name) == (1, kinds[key], "completed", f"phase {key}")
            assert any(link.context.is_valid for link in s.links)  # to the Celery run it ran in
        # one span per model call: each phase but the lexical check made one, as its child
        by_id = {s.context.span_id: s for s in phases}
        calls = [s for s in spans if s.name == "chat normal" and s.context.trace_id == trace_id]
        assert sorted(_attr(by_id[c.parent.span_id], "conclave.phase.key") for c in calls if c.parent) == \
            sorted(p["key"] for p in view["phases"] if p["kind"] != "divergence")
        assert len(calls) == sum(1 for p in view["phases"] if p["kind"] != "divergence")
        for c in calls:
            assert c.kind == SpanKind.CLIENT
            assert (_attr(c, "gen_ai.provider.name"), _attr(c, "gen_ai.request.model"), _attr(c, "conclave.model"),
                    _attr(c, "gen_ai.usage.input_tokens"), _attr(c, "gen_ai.usage.output_tokens"),
                    _attr(c, "conclave.llm.tokens_source"), _attr(c, "conclave.llm.outcome")) == \
                ("openai", "normal", "gpt", llm.prompt_tokens, llm.completion_tokens, "provider", "ok")
        # the instrumented libraries: each call's HTTP request is its child; the phases' SQL in the trace
        call_ids = {c.context.span_id for c in calls}
        http = [s for s in spans if s.context.trace_id == trace_id and s.kind == SpanKind.CLIENT
                and (_attr(s, "http.request.method") or _attr(s, "http.method"))]
        assert {s.parent.span_id for s in http if s.parent} == call_ids
        assert any(_attr(s, "db.system") == "sqlite" or _attr(s, "db.system.name") == "sqlite"
                   for s in spans if s.context.trace_id == trace_id)
    assert len(traces) == 2  # a second plan, a second trace
    names = {s.name for s in spans}
    assert "POST /v1/plans" in names and "run/conclave.run_phase" in names  # FastAPI and Celery


def test_without_the_setting_or_the_extra_tracing_does_nothing(tmp_path: Path, monkeypatch: Any) -> None:
    off = Settings(home=tmp_path / "home", otel=False)
    assert not tracing.setup(off, service="conclave-test")
    assert tracing.call_hooks() == []
    with tracing.phase_span(plan_id="p", phase_id="x", key="k", attempt=1, kind="turn") as span:
        span.outcome("completed")
    # the extra missing: a warning, no traces, nothing fails
    for name in ("orchestrator.tracing.otel", "opentelemetry.instrumentation.celery"):
        monkeypatch.setitem(sys.modules, name, None)
    assert not tracing.setup(off.model_copy(update={"otel": True}), service="conclave-test")
    assert tracing.call_hooks() == []


def test_a_plans_trace_id_is_its_uuid_and_its_span_id_is_derived_from_it() -> None:
    plan_id = str(uuid.uuid4())
    assert tracing.plan_trace_id(plan_id) == uuid.UUID(plan_id).int
    assert tracing.plan_span_id(plan_id) == tracing.plan_span_id(plan_id) != tracing.plan_span_id(str(uuid.uuid4()))
    assert 0 < tracing.plan_trace_id("not-a-uuid") < 2**128 and 0 < tracing.plan_span_id(plan_id) < 2**64
