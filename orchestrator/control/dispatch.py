"""How a compiled canvas reaches the workers, in the shape of httpx's transports.

:class:`Dispatcher` is a one-method interface, ``send(canvas)``, which raises when the
canvas could not be handed over. :class:`CeleryDispatcher` sends it through a Celery
app by task name; :class:`RecordingDispatcher` keeps what it was given (and may pass it
to a handler), so the coordinator can be driven without a broker (the unit tier, the
benchmarks' history runs).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from celery import Celery

from orchestrator.plan.canvas import Canvas, to_signature


class Dispatcher(Protocol):
    """Sends a compiled canvas to the workers. Raises on failure (the coordinator then
    releases the phases' enqueue marks and reports the broker unavailable)."""

    def send(self, canvas: Canvas) -> None: ...


class CeleryDispatcher:
    """Sends compiled canvases through a Celery app, by registered task name — the
    control plane never imports a task body."""

    def __init__(self, app: Celery) -> None:
        self.app = app

    def send(self, canvas: Canvas) -> None:
        sig: Any = to_signature(canvas, self.app)
        sig.apply_async()


class RecordingDispatcher:
    """Keeps every canvas it is sent, in order, and passes each to ``handler`` when one
    is given. A handler that raises makes :meth:`send` raise, as a broker outage would.
    Tests run the recorded canvases by hand (``take()``, then run each phase and
    advance), the way a worker would."""

    def __init__(self, handler: Callable[[Canvas], None] | None = None) -> None:
        self.handler = handler
        self.sent: list[Canvas] = []
        self._lock = threading.Lock()

    def send(self, canvas: Canvas) -> None:
        if self.handler is not None:
            self.handler(canvas)
        with self._lock:
            self.sent.append(canvas)

    def take(self) -> list[Canvas]:
        """The canvases recorded since the last call, oldest first."""
        with self._lock:
            taken, self.sent = self.sent, []
        return taken
