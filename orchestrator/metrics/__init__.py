"""Prometheus metrics, with ``prometheus_client``.

- :mod:`~orchestrator.metrics.recorder` — every metric a worker records, defined once, and
  this process's :func:`recorder` (call sites say what happened: ``recorder().lease_lost()``);
- :mod:`~orchestrator.metrics.calls` — :class:`MeasureCalls`, the gateway hook that measures
  model calls;
- :mod:`~orchestrator.metrics.processes` — where a worker's values live (memory, or files a
  prefork pool's processes share) and what its exporter serves;
- :mod:`~orchestrator.metrics.exporter` — a worker's ``/metrics`` over HTTP;
- :mod:`~orchestrator.metrics.live_gauges` — the API's gauges of live plans and phases.

Recording never adds a SQL statement or a network call to a phase: a worker's metrics are
updated in memory (or a memory-mapped file) and read only when scraped.
"""

from orchestrator.metrics.calls import MeasureCalls
from orchestrator.metrics.live_gauges import FleetCollector
from orchestrator.metrics.recorder import Recorder, recorder

__all__ = ["FleetCollector", "MeasureCalls", "Recorder", "recorder"]
