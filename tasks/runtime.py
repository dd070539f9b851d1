"""What a worker process needs, built once per Celery app: database, bus, coordinator,
phase runner, lease keeper, housekeeper.

A worker builds it lazily from ``CONCLAVE_*`` on its first task (after the fork,
for prefork). When the process that built the app attached its resources to it
(``orchestrator.fleet.celery_app.share`` — the embedded mode), the runtime reuses them,
so the in-process worker shares the caller's database, in-memory bus and coordinator.

What a worker sets up as it starts (its housekeeper, its metrics) stops it when it fails,
with one line saying why (:func:`or_stop`): Celery would log the error of a signal handler
and run on without what it set up. The checks before that are
:func:`orchestrator.fleet.startup.start`'s.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import wraps
from typing import Any, TypeVar

from celery import Celery, signals
from celery.exceptions import WorkerShutdown

from orchestrator.control.coordinator import Coordinator
from orchestrator.control.dispatch import CeleryDispatcher
from orchestrator.core.bus import Bus, open_bus
from orchestrator.core.errors import ConclaveError
from orchestrator.core.settings import Settings
from orchestrator.fleet.celery_app import shared
from orchestrator.gateway.model_gateway import default_providers
from orchestrator.metrics import exporter, processes
from orchestrator.webhooks.courier import Courier
from storage import Database
from tasks.housekeeping import Housekeeper
from tasks.lease import LeaseKeeper
from tasks.runner import PhaseRunner


@dataclass
class Runtime:
    settings: Settings
    db: Database
    coordinator: Coordinator
    runner: PhaseRunner
    leases: LeaseKeeper
    housekeeper: Housekeeper
    worker_id: str
    owns_db: bool = True
    owns_bus: bool = True
    pid: int = field(default_factory=os.getpid)  # the process it was built in

    def close(self) -> None:
        signals.worker_shutting_down.disconnect(dispatch_uid=self._shutdown_uid)
        self.housekeeper.stop()
        self.leases.close()
        if self.owns_bus:
            self.runner.bus.close()  # what is still queued reaches the watchers
        if self.owns_db:
            self.db.dispose()

    @property
    def _shutdown_uid(self) -> str:
        return f"conclave.runtime.shutdown.{self.worker_id}"

    def stop_calls_on_shutdown(self) -> None:
        """SIGTERM (Celery's warm shutdown) stops this process's model calls at their next
        chunk; their phases go back to other workers (:meth:`tasks.lease.LeaseKeeper.shut_down`)."""
        def shutting_down(**_: Any) -> None:
            self.housekeeper.stop(timeout=0)
            self.leases.shut_down()

        signals.worker_shutting_down.connect(shutting_down, weak=False, dispatch_uid=self._shutdown_uid)


def build_runtime(settings: Settings, app: Celery, *, db: Database | None = None, bus: Bus | None = None,
                  coordinator: Coordinator | None = None) -> Runtime:
    owns_db = db is None
    db = db or settings.open_database()  # its budget, whatever the concurrency (CONCLAVE_DATABASE_POOL_SIZE)
    owns_bus = bus is None
    bus = bus or open_bus(settings.redis_url)
    coordinator = coordinator or Coordinator(db, settings, CeleryDispatcher(app), bus)
    runner = PhaseRunner(db, settings, bus, default_providers(testing=settings.testing))

    def advance_released(plan_ids: Sequence[str]) -> None:  # fair share: a finish released their held phase
        for plan_id in dict.fromkeys(plan_ids):
            coordinator.advance(plan_id)

    runner.on_release = advance_released
    worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    courier = Courier(db, settings) if settings.webhook_key is not None else None  # no key: it could sign nothing
    runtime = Runtime(settings, db, coordinator, runner, LeaseKeeper(runner.renew, settings.heartbeat_seconds),
                      Housekeeper(db, coordinator, interval=settings.reconcile_interval,
                                  stalled_after=max(2 * settings.lease_seconds, 3 * settings.reconcile_interval),
                                  courier=courier),
                      worker_id, owns_db, owns_bus)
    runtime.stop_calls_on_shutdown()
    return runtime


log = logging.getLogger(__name__)

_RUNTIME = "conclave_runtime"
_lock = threading.Lock()
F = TypeVar("F", bound=Callable[..., Any])


def or_stop(what: str) -> Callable[[F], F]:
    """A worker signal handler that, when it fails, stops the worker (exit 1) after one log
    line naming ``what`` failed and why — instead of Celery's ``Signal handler … raised``
    and a worker running on without it."""
    def decorate(handler: F) -> F:
        @wraps(handler)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return handler(*args, **kwargs)
            except Exception as exc:
                reason = f"[{exc.code}] {exc.message}" if isinstance(exc, ConclaveError) else \
                    f"{type(exc).__name__}: {exc}"
                log.critical("the worker stops: %s failed: %s", what, reason, extra={"action": "worker.refused"})
                raise WorkerShutdown(1) from None

        return guarded  # type: ignore[return-value]

    return decorate


def current(app: Celery) -> Runtime:
    """The runtime of ``app`` in this process, built on first use: from the resources the
    app's builder shared with it when there are some, else from ``CONCLAVE_*``."""
    with _lock:
        found = getattr(app, _RUNTIME, None)
        if isinstance(found, Runtime):
            if found.pid == os.getpid():
                return found
            # a prefork child forked after its parent built a runtime (one that replaces a child
            # that died): the parent's pooled connections must not be used, nor closed, here
            found.db.engine.dispose(close=False)
        resources = shared(app)
        if resources is None:
            runtime = build_runtime(Settings(), app)
        else:
            runtime = build_runtime(resources.settings, app, db=resources.db, bus=resources.bus,
                                    coordinator=resources.coordinator)
            resources.closers.append(lambda: _forget(app, runtime))
        setattr(app, _RUNTIME, runtime)
        return runtime


@signals.worker_ready.connect(weak=False, dispatch_uid="conclave.runtime.housekeeping")
@or_stop("starting the housekeeper")
def start_housekeeping(sender: Any = None, **_: Any) -> None:
    """A cluster worker, once ready to take work, reconciles and then keeps the fleet
    healing on its own timer (:mod:`tasks.housekeeping`). The embedded worker has its own
    reconciler thread in the caller's process."""
    app = getattr(sender, "app", None)
    if app is None:
        return
    rt = current(app)
    if rt.settings.embedded:
        return
    rt.housekeeper.start()
    log.info("reconciling every %ss under the fleet-wide lock", rt.settings.reconcile_interval,
             extra={"action": "reconcile.started"})
    if rt.housekeeper.courier is not None:
        log.info("delivering webhooks (every %ss, %d at once)", rt.settings.webhook_interval,
                 rt.settings.webhook_concurrency, extra={"action": "webhook.started"})


@signals.worker_init.connect(weak=False, dispatch_uid="conclave.runtime.metrics.prepare")
@or_stop("preparing the metrics")
def prepare_metrics(sender: Any = None, **_: Any) -> None:
    """Before the pool starts: a prefork worker's processes will share their metric values
    through files under ``CONCLAVE_STATE_DIR`` (:mod:`orchestrator.metrics.processes`)."""
    app = getattr(sender, "app", None)
    if app is None:
        return
    resources = shared(app)  # not the runtime: its database must not be opened before the fork
    settings = resources.settings if resources is not None else Settings()
    if settings.metrics_port is not None:
        processes.prepare(settings.state_dir, prefork=_prefork(getattr(sender, "pool_cls", None)))


@signals.worker_ready.connect(weak=False, dispatch_uid="conclave.runtime.metrics.serve")
@or_stop("serving the metrics")
def serve_metrics(sender: Any = None, **_: Any) -> None:
    """Serve the worker's metrics over HTTP when ``CONCLAVE_METRICS_PORT`` is set."""
    app = getattr(sender, "app", None)
    if app is None:
        return
    settings = current(app).settings
    if settings.metrics_port is not None:
        exporter.serve(settings.metrics_host, settings.metrics_port, processes.registry())


@signals.worker_process_shutdown.connect(weak=False, dispatch_uid="conclave.runtime.metrics.forget")
def forget_process(pid: int | None = None, **_: Any) -> None:
    """A prefork child exits: its phases are no longer in flight."""
    processes.forget(pid or os.getpid())


@signals.worker_shutdown.connect(weak=False, dispatch_uid="conclave.runtime.metrics.close")
def close_metrics(**_: Any) -> None:
    exporter.stop()
    processes.close()


def _prefork(pool: Any) -> bool:
    from celery.concurrency import get_implementation
    from celery.concurrency.prefork import TaskPool

    cls = get_implementation(pool) if pool is not None else None
    return isinstance(cls, type) and issubclass(cls, TaskPool)


def _forget(app: Celery, runtime: Runtime) -> None:
    with _lock:
        if getattr(app, _RUNTIME, None) is runtime:
            delattr(app, _RUNTIME)
    runtime.close()
