"""Where a worker's metric values live, so that one scrape sees the whole worker.

A worker on the threads, solo or gevent pool is one process: its values are in memory and
the exporter serves the default registry. Under the prefork pool the phases run in child
processes, so every process of the worker (the parent runs the reconciler) writes its values
to memory-mapped files in one directory and the exporter, in the parent, adds them up —
prometheus_client's multiprocess mode, chosen by :func:`prepare` before the pool forks.

The directory is ``CONCLAVE_STATE_DIR/metrics/<the worker's pid>`` (``PROMETHEUS_MULTIPROC_DIR``
is set to it for the pool's children): emptied when the worker starts, so its counters start
from zero with it as they do in one process; removed when it stops (:func:`close`); a
directory left by a worker that died is removed by the next one to start. A child that exits
says so (:func:`forget`, on Celery's ``worker_process_shutdown``); one that was killed is
noticed at the next scrape. Either way ``mark_process_dead`` drops its live gauges (phases in
flight), while its counters and histograms stay, so totals never go backwards.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry, values
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from orchestrator.metrics.recorder import recording

log = logging.getLogger(__name__)

ENV = "PROMETHEUS_MULTIPROC_DIR"
_LIVE_GAUGE = re.compile(r"^gauge_live\w*_(\d+)\.db$")

_directory: Path | None = None


def prepare(state_dir: Path, *, prefork: bool) -> Path | None:
    """Choose where this worker's values live, before its pool starts. Under prefork: files in
    a fresh directory under ``state_dir`` (returned); otherwise memory (None)."""
    global _directory
    if not prefork:
        return None
    if recording():  # values already made in memory would be missing from every scrape
        raise RuntimeError("metrics were recorded before the worker chose where they live")
    root = state_dir / "metrics"
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.iterdir():  # left by workers that died
        if stale.is_dir() and stale.name.isdigit() and not _alive(int(stale.name)):
            shutil.rmtree(stale, ignore_errors=True)
    directory = root / str(os.getpid())
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir()
    os.environ[ENV] = str(directory)  # inherited by the pool's children
    # prometheus_client picks memory or files when it is imported, from this variable; the
    # worker's own code imported it long before the pool was known, so choose again
    values.ValueClass = values.MultiProcessValue()
    _directory = directory
    return directory


def registry() -> CollectorRegistry:
    """What the exporter serves: every process's files added up, or this process's memory."""
    if _directory is None:
        return REGISTRY
    shared = CollectorRegistry(auto_describe=False)
    shared.register(_WholeWorker(_directory))
    return shared


def forget(pid: int) -> None:
    """Process ``pid`` of this worker has exited: drop its live gauges."""
    if _directory is not None:
        mark_process_dead(pid, str(_directory))


def close() -> None:
    """The worker stops: its values go with it."""
    global _directory
    if _directory is not None:
        shutil.rmtree(_directory, ignore_errors=True)
        _directory = None


class _WholeWorker:
    """Every process's values, after dropping the live gauges of processes that died without
    saying so (SIGKILL, the OOM killer): their phases are no longer in flight."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._files = MultiProcessCollector(None, path=str(directory))

    def collect(self) -> Iterable[Metric]:
        for entry in os.listdir(self._directory):
            found = _LIVE_GAUGE.match(entry)
            if found and not _alive(int(found.group(1))):
                mark_process_dead(int(found.group(1)), str(self._directory))
        return self._files.collect()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True
