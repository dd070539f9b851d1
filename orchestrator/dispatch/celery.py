"""The production dispatcher: a canvas becomes Celery chains and chords, sent by task name."""

from __future__ import annotations

from typing import Any

from celery import Celery

from orchestrator.canvas import Canvas, to_signature


class CeleryDispatcher:
    """Sends compiled canvases through a Celery app, by registered task name — the
    control plane never imports a task body."""

    def __init__(self, app: Celery) -> None:
        self.app = app

    def send(self, canvas: Canvas) -> None:
        sig: Any = to_signature(canvas, self.app)
        sig.apply_async()
