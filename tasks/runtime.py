"""What a worker process needs, built once: database, bus, coordinator, gateway, lease keeper.

A worker builds it lazily from ``CONCLAVE_*`` on its first task (after the fork,
for prefork). The embedded mode builds one itself and :func:`install` s it, so the
in-process worker shares the caller's database and in-memory bus.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from dataclasses import dataclass

from celery import Celery

from orchestrator.bus import Bus, MemoryBus, RedisBus
from orchestrator.celery_app import CeleryDispatcher
from orchestrator.coordinator import Coordinator
from orchestrator.settings import Settings
from storage import Database, connect
from tasks.lease import LeaseKeeper
from tasks.llm.gateway import default_providers
from tasks.llm.types import Provider


@dataclass
class Runtime:
    settings: Settings
    db: Database
    coordinator: Coordinator
    providers: dict[str, Provider]
    leases: LeaseKeeper
    worker_id: str

    def close(self) -> None:
        self.leases.close()
        self.db.dispose()


def build_runtime(settings: Settings, app: Celery, *, db: Database | None = None,
                  bus: Bus | None = None) -> Runtime:
    db = db or connect(settings.effective_database_url, pool_size=settings.concurrency + 2)
    if bus is None:
        bus = RedisBus(settings.redis_url) if settings.redis_url else MemoryBus()
    coordinator = Coordinator(db, settings, CeleryDispatcher(app), bus)
    worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    return Runtime(settings, db, coordinator, default_providers(),
                   LeaseKeeper(coordinator.renew, settings.heartbeat_seconds), worker_id)


_installed: Runtime | None = None
_lock = threading.Lock()


def install(runtime: Runtime | None) -> None:
    global _installed
    with _lock:
        _installed = runtime


def current(app: Celery) -> Runtime:
    """The process's runtime; built from the environment on first use."""
    global _installed
    with _lock:
        if _installed is None:
            _installed = build_runtime(Settings(), app)
        return _installed
