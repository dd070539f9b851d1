"""The Celery application, configured for at-least-once delivery.

Both sides build it from :class:`Settings`: the coordinator to send tasks by
their registered names (:class:`~orchestrator.control.dispatch.CeleryDispatcher`), the
worker (``celery -A tasks worker``, see ``tasks/celery.py``) to run them. Task
modules are named in ``include`` — Celery imports them, the control plane never
does; a process that runs a worker in itself attaches its resources with
:func:`share`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from celery import Celery
from celery.backends.redis import RedisBackend
from kombu.transport import memory

from orchestrator.control.coordinator import Coordinator
from orchestrator.core.bus import Bus
from orchestrator.core.settings import Settings
from storage import Database

TASK_MODULES = ["tasks.phase"]
QUEUE = "conclave"


def build_app(settings: Settings) -> Celery:
    broker: str | None
    backend: str | None
    if settings.embedded:
        # kombu's in-memory transport and the in-memory cache backend (which counts
        # chord parts natively): a real worker consuming real messages in-process.
        broker, backend = "memory://localhost//", "cache+memory://"
    else:
        broker, backend = settings.broker_url, settings.result_backend
        if backend and backend.startswith(("redis://", "rediss://")):
            backend = f"{__name__}:TriggerRedisBackend+{backend}"
    app = Celery("conclave", broker=broker, backend=backend, include=TASK_MODULES, set_as_current=False)
    vt = settings.visibility_timeout
    transport_options: dict[str, Any] = {"visibility_timeout": vt}
    if settings.embedded:
        transport_options["polling_interval"] = 0.01  # the in-memory queue is polled; keep hops fast
        app.conf.broker_transport = EmbeddedTransport
    app.conf.update(
        # at-least-once: ack after the body ran; a killed worker's message is redelivered
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # Redis redelivers an unacked message after the visibility timeout even while it
        # still runs; Celery reads the value in three places — set all of them.
        visibility_timeout=vt,
        broker_transport_options=transport_options,
        result_backend_transport_options={"visibility_timeout": vt},
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        result_expires=6 * 3600,
        task_default_queue=QUEUE,
        worker_pool=settings.pool,
        worker_concurrency=settings.concurrency,
        worker_hijack_root_logger=False,
        worker_send_task_events=True,  # Flower
        task_send_sent_event=True,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        redis_socket_keepalive=True,
        # `conclave health beat`: beat answers a ping while its scheduler ticks (every reconcile
        # interval at least), and goes silent once it has not for a few intervals
        beat_enable_remote_control=True,
        beat_remote_control_max_tick_age=max(3 * settings.reconcile_interval, 30.0),
        beat_schedule={
            "conclave-reconcile": {"task": "conclave.reconcile", "schedule": settings.reconcile_interval},
            "conclave-prune": {"task": "conclave.prune", "schedule": 3600.0},
        },
    )
    return app


class TriggerRedisBackend(RedisBackend):
    """Celery's Redis result backend, minus the result subscription on every send.

    Conclave never waits on a task result (canvases are triggers; the database is
    the record), but the stock backend subscribes to the result channel of every
    task a process sends and keeps it pending until the result object is garbage
    collected — a leak in a long-lived worker that sends a canvas per advance.
    Chord counting (``on_chord_part_return``) is untouched.
    """

    def on_task_call(self, producer: Any, task_id: str) -> None:
        return None

    def on_result_fulfilled(self, result: Any) -> None:
        return None  # nothing was subscribed, so there is nothing to unsubscribe


class EmbeddedTransport(memory.Transport):
    """kombu's in-memory transport, whose wait for a message gives up after a tenth of a second.

    Celery's consumer loop waits up to 2 s for a message before it looks whether it should
    stop, so stopping an embedded worker (every ``conclave run``, every closed local client)
    waited out that poll; now the loop looks ten times a second. Messages, queues and their
    state are the stock transport's."""

    def drain_events(self, connection: Any, timeout: Any = None) -> Any:  # type: ignore[override]  # as virtual.Transport
        return super().drain_events(connection, timeout=None if timeout is None else min(timeout, 0.1))


@dataclass
class Shared:
    """What a process that built the app shares with a worker running in it (the embedded
    mode): the worker's runtime reuses these instead of reading ``CONCLAVE_*`` again, so the
    in-process worker sees the caller's database, in-memory bus and coordinator.

    The control plane attaches it (:func:`share`); ``tasks.runtime`` reads it
    (:func:`shared`) — so the control plane never imports task code. ``closers`` are run,
    newest first, when the sharing client closes."""

    settings: Settings
    db: Database
    bus: Bus
    coordinator: Coordinator
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        while self.closers:
            self.closers.pop()()


_SHARED = "conclave_shared"


def share(app: Celery, resources: Shared) -> None:
    setattr(app, _SHARED, resources)


def shared(app: Celery) -> Shared | None:
    found = getattr(app, _SHARED, None)
    return found if isinstance(found, Shared) else None
