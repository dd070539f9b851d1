"""Every metric a worker process records, defined once: :class:`Recorder`.

Call sites say what happened (``recorder().lease_lost()``); the metric objects, their
labels and buckets live here. A process has one recorder, built on first use — after the
worker decided where metric values live (:func:`orchestrator.metrics.processes.prepare`:
memory, or files shared by a prefork pool's processes). Recording is an update in memory (or
in a memory-mapped file): never a SQL statement, never a network call.

Label values are bounded: a phase's kind and an outcome come from the code; a model's name
may come from a plan (plan-defined models), so a process labels at most
:data:`MAX_MODEL_LABELS` distinct (provider, model) pairs and counts the rest as ``other``.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from orchestrator.gateway.types import ModelSpec

PHASE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
CALL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300)
FIRST_CHUNK_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60)
MAX_MODEL_LABELS = 100
OTHER = "other"
ABANDONED = "abandoned"  # a phase left to its lease: the database was unavailable, or the process was stopped


class PhaseTimer:
    """Times one phase from its claim to its stored end (``with recorder().phase(kind) as t:
    t.outcome = …``); counts it in flight meanwhile. An exception leaves it ``abandoned``."""

    def __init__(self, recorder: Recorder, kind: str) -> None:
        self._recorder = recorder
        self._kind = kind
        self.outcome = ABANDONED
        self._started = 0.0

    def __enter__(self) -> PhaseTimer:
        self._started = time.monotonic()
        self._recorder.phases_in_flight.inc()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._recorder.phases_in_flight.dec()
        self._recorder.phase_seconds.labels(self._kind, str(self.outcome)).observe(time.monotonic() - self._started)


class Recorder:
    """The worker's metrics (names as exported, with ``_total`` on counters):

    - ``conclave_phase_duration_seconds{kind, outcome}`` — claim to stored end, per phase
      kind and outcome (completed, failed, cancelled, fenced, released, abandoned);
    - ``conclave_phases_in_flight`` — phases this worker is running now;
    - ``conclave_model_call_duration_seconds{provider, model, outcome}`` — one call attempt
      (the stream, and its non-streaming fallback when there is one); outcome ``ok`` or the
      error code;
    - ``conclave_model_first_chunk_seconds{provider, model}`` — from the attempt's start to
      the first text the caller saw (a fallback's: when its replay began);
    - ``conclave_model_tokens_total{provider, model, source, direction}`` — the tokens of
      every usage row written, by who counted them (``provider`` report or ``estimated``)
      and direction (``input``/``output``);
    - ``conclave_model_retries_total{provider, model, code}``,
      ``conclave_model_fallbacks_total{provider, model, reason}``,
      ``conclave_model_truncations_total{provider, model, reason}``;
    - ``conclave_leases_lost_total`` — model calls stopped because their lease was taken
      over by another attempt or their plan cancelled (learnt at a heartbeat);
    - ``conclave_lease_takeovers_total`` — running phases whose lease had expired, sent to
      the fleet again (by this process's advance: its reconciler, or a lane's end);
    - ``conclave_reconciler_sweeps_total{result}`` — ``swept`` (this process held the
      fleet-wide lock), ``skipped`` (another did), ``failed``;
    - ``conclave_reconciler_actions_total{action}`` — plans found ``stalled``, ``nudged``
      (re-derived, something sent), ``failed`` (their advance failed);
    - ``conclave_retention_pruned_events_total`` — events deleted by retention.
    """

    def __init__(self, registry: CollectorRegistry | None = REGISTRY) -> None:
        model = ["provider", "model"]
        self.phase_seconds = Histogram(
            "conclave_phase_duration_seconds", "Phases run by this worker: claim to stored end, in seconds.",
            ["kind", "outcome"], buckets=PHASE_BUCKETS, registry=registry)
        self.phases_in_flight = Gauge(
            "conclave_phases_in_flight", "Phases this worker is running now.", multiprocess_mode="livesum",
            registry=registry)
        self.call_seconds = Histogram(
            "conclave_model_call_duration_seconds", "Model call attempts: seconds from the request to its end.",
            [*model, "outcome"], buckets=CALL_BUCKETS, registry=registry)
        self.first_chunk_seconds = Histogram(
            "conclave_model_first_chunk_seconds", "Seconds from a model call's start to the first text shown.",
            model, buckets=FIRST_CHUNK_BUCKETS, registry=registry)
        self.tokens = Counter(
            "conclave_model_tokens", "Tokens of the usage rows written, by who counted them and direction.",
            [*model, "source", "direction"], registry=registry)
        self.retries = Counter("conclave_model_retries", "Model call attempts retried, by error code.",
                               [*model, "code"], registry=registry)
        self.fallbacks = Counter(
            "conclave_model_fallbacks", "Streams given up for the non-streaming call, by reason.",
            [*model, "reason"], registry=registry)
        self.truncations = Counter(
            "conclave_model_truncations", "Streams that broke after showing text (kept, marked truncated).",
            [*model, "reason"], registry=registry)
        self.leases_lost = Counter(
            "conclave_leases_lost", "Model calls stopped: their lease was taken over or their plan cancelled.",
            registry=registry)
        self.takeovers = Counter(
            "conclave_lease_takeovers", "Running phases whose lease expired, sent to the fleet again.",
            registry=registry)
        self.sweeps = Counter("conclave_reconciler_sweeps", "Reconciler ticks of this worker, by result.",
                              ["result"], registry=registry)
        self.reconciler_actions = Counter(
            "conclave_reconciler_actions", "Plans the reconciler found stalled, nudged, or failed to nudge.",
            ["action"], registry=registry)
        self.pruned_events = Counter("conclave_retention_pruned_events", "Events deleted by retention.",
                                     registry=registry)
        self._models: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def phase(self, kind: str) -> PhaseTimer:
        return PhaseTimer(self, kind)

    def model_labels(self, spec: ModelSpec) -> tuple[str, str]:
        """(provider, model) as labelled: the first :data:`MAX_MODEL_LABELS` pairs this
        process sees, then ``other``."""
        key = (spec.provider, (spec.model or spec.name)[:80])
        if key in self._models:
            return key
        with self._lock:
            if len(self._models) < MAX_MODEL_LABELS:
                self._models.add(key)
                return key
        return spec.provider, OTHER

    def lease_lost(self) -> None:
        self.leases_lost.inc()

    def taken_over(self, phases: int) -> None:
        if phases:
            self.takeovers.inc(phases)

    def swept(self, result: str) -> None:
        self.sweeps.labels(result).inc()

    def reconciled(self, action: str, plans: int = 1) -> None:
        if plans:
            self.reconciler_actions.labels(action).inc(plans)

    def pruned(self, events: int) -> None:
        if events:
            self.pruned_events.inc(events)


_recorder: Recorder | None = None
_built = threading.Lock()


def recorder() -> Recorder:
    """This process's recorder, built on first use (in the default registry)."""
    global _recorder
    if _recorder is None:
        with _built:
            if _recorder is None:
                _recorder = Recorder()
    return _recorder


def recording() -> bool:
    """Whether this process has built its recorder yet (its metric values exist)."""
    return _recorder is not None
