"""Traces with OpenTelemetry — optional: ``pip install 'conclave[otel]'`` and ``CONCLAVE_OTEL=true``.

Entry points call :func:`setup` (the API also :func:`instrument_api`); the worker's code
calls :func:`phase_span` around a claimed phase and adds :func:`call_hooks` to the
gateway's hooks. Until :func:`setup` succeeded in this process these do nothing, and
nothing here imports OpenTelemetry: without the extra (or with ``CONCLAVE_OTEL`` off)
nothing changes and nothing fails. :mod:`orchestrator.tracing.otel` is the rest: what is
instrumented, the spans and their attributes; :mod:`orchestrator.tracing.trace_ids` how a plan's
trace is derived from its id, so that every phase of a plan is in one trace whichever
worker runs it.

Instrumentation is a property of the process (OpenTelemetry patches libraries), so the
tracing that :func:`setup` starts is kept here, once per process.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.core.settings import Settings
from orchestrator.gateway.model_gateway import CallHook
from orchestrator.tracing.trace_ids import plan_span_id, plan_trace_id

if TYPE_CHECKING:
    from orchestrator.tracing.otel import Tracing

__all__ = ["PhaseSpan", "call_hooks", "instrument_api", "phase_span", "plan_span_id", "plan_trace_id", "setup",
           "shutdown"]

log = logging.getLogger(__name__)
_active: list[Tracing] = []  # the process's tracing, once set up


class PhaseSpan(Protocol):
    def outcome(self, outcome: str) -> None:
        """How the attempt ended (``completed``, ``failed``, ``cancelled``, ``fenced``, ``released``)."""


class _NoSpan:
    def outcome(self, outcome: str) -> None:
        return None


def setup(settings: Settings, *, service: str, provider: Any = None) -> bool:
    """Start tracing this process if ``CONCLAVE_OTEL`` is on and the extra is installed
    (a warning says so when it is not); True when traces are on. ``service`` names the
    process (``conclave-api``, ``conclave-worker`` …) unless ``OTEL_SERVICE_NAME`` does;
    ``provider``: a tracer provider to use instead of the OTLP exporter (tests)."""
    if not settings.otel:
        return False
    if _active:
        return True
    try:
        from orchestrator.tracing.otel import Tracing
    except ImportError as exc:
        log.warning("CONCLAVE_OTEL is on but conclave[otel] is not installed (%s): no traces", exc.name,
                    extra={"action": "tracing.unavailable"})
        return False
    _active.append(Tracing.start(service, provider))
    log.info("tracing on (%s)", service, extra={"action": "tracing.started"})
    return True


def shutdown() -> None:
    """Undo :func:`setup`: remove the instrumentation, flush what was recorded."""
    while _active:
        _active.pop().stop()


def instrument_api(app: Any) -> None:
    """Server spans for the API's requests (FastAPI), when tracing is on."""
    if _active:
        _active[0].instrument_api(app)


@contextmanager
def phase_span(*, plan_id: str, phase_id: str, key: str, attempt: int, kind: str) -> Iterator[PhaseSpan]:
    """The span of one claimed attempt of a phase, in the plan's trace; say how it ended
    with :meth:`PhaseSpan.outcome`."""
    if not _active:
        yield _NoSpan()
        return
    with _active[0].phase(plan_id=plan_id, phase_id=phase_id, key=key, attempt=attempt, kind=kind) as span:
        yield span


def call_hooks() -> list[CallHook]:
    """The gateway hooks that trace model calls: one span per call attempt (none when off)."""
    return [_active[0].call_hook()] if _active else []
