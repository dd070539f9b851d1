"""The dispatcher interface: the coordinator's only way to enqueue work."""

from __future__ import annotations

from typing import Protocol

from orchestrator.canvas import Canvas


class Dispatcher(Protocol):
    """Sends a compiled canvas to the workers. Raises on failure (the coordinator then
    releases the phases' enqueue marks and reports the broker unavailable)."""

    def send(self, canvas: Canvas) -> None: ...
