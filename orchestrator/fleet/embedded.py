"""Embedded mode: a real Celery worker inside this process, on kombu's in-memory
transport, with a SQLite file for state — what ``conclave run`` uses when no
broker or database is configured. Not eager mode: tasks are serialised, sent,
consumed and acknowledged like on a cluster, and a reconciler thread plays beat.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import Celery
from celery.worker import WorkController

from orchestrator.control.coordinator import Coordinator

log = logging.getLogger(__name__)


class _Controller(WorkController):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.started = threading.Event()
        super().__init__(*args, **kwargs)

    def on_consumer_ready(self, consumer: Any) -> None:
        self.started.set()


class EmbeddedWorker:
    def __init__(self, app: Celery, coordinator: Coordinator, *, concurrency: int, reconcile_every: float) -> None:
        self._app = app
        self._coordinator = coordinator
        self._concurrency = concurrency
        self._reconcile_every = reconcile_every
        self._stop = threading.Event()
        self._worker: _Controller | None = None
        self._threads: list[threading.Thread] = []

    def start(self, timeout: float = 30.0) -> None:
        from orchestrator.fleet.celery_app import QUEUE

        # Task bodies, chains and chords resolve "the current app" when they send the
        # next step: in this process that must be the embedded one.
        self._app.set_current()
        self._app.set_default()
        self._app.loader.import_default_modules()
        self._worker = _Controller(app=self._app, pool="threads", concurrency=self._concurrency,
                                   hostname=f"embedded-{id(self)}@localhost", loglevel="WARNING",
                                   without_heartbeat=True, without_mingle=True, without_gossip=True,
                                   queues=[QUEUE], ready_callback=None)
        worker = threading.Thread(target=self._worker.start, name="conclave-worker", daemon=True)
        reconciler = threading.Thread(target=self._reconcile_loop, name="conclave-reconciler", daemon=True)
        self._threads = [worker, reconciler]
        worker.start()
        if not self._worker.started.wait(timeout):
            raise RuntimeError("embedded worker did not start")
        reconciler.start()

    def _reconcile_loop(self) -> None:
        while not self._stop.wait(self._reconcile_every):
            try:
                self._coordinator.expire_deadlines()  # people's seats past their deadline, as a worker's sweep does
                self._coordinator.reconcile()
            except Exception as exc:
                log.warning("reconcile failed: %s", exc, extra={"action": "reconcile.failed"})

    def stop(self, timeout: float = 10.0) -> None:
        from celery.worker import state

        self._stop.set()
        if self._worker is not None:
            state.should_terminate = 0
            self._worker.stop(in_sighandler=False, exitcode=0)
        for t in self._threads:
            t.join(timeout)
        state.should_terminate = None
