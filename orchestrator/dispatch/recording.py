"""A dispatcher for tests: it records every canvas instead of sending it."""

from __future__ import annotations

import threading
from collections.abc import Callable

from orchestrator.canvas import Canvas


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
